"""Pipeline glue: the validated config and experiment ids, where every output lives, MLflow
tracking, and one job module per rule family called by the thin ``workflow_scripts``."""
