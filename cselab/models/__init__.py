"""The model shared by training and evaluation: a PLM resolved to a local checkpoint
(:mod:`.checkpoints`), the sentence encoder over it (:mod:`.encoder`, with the forward over real
tokens only in :mod:`.unpadded`), and the training heads (:mod:`.heads`)."""
