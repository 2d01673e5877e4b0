"""Stage 2, training: one loop (:mod:`.loop`) for every method; a method (:mod:`.methods`) brings
its positives, heads, extra networks and loss terms; pretraining stages produce its inputs."""
