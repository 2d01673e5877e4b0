"""User-facing errors.

Anything a user can cause (a bad config value, missing or corrupt data, an unknown model)
raises a :class:`CselabError` whose message names the culprit and the fix. Workflow scripts
turn it into one clear line on stderr and a non-zero exit instead of a traceback.
"""


class CselabError(Exception):
    """An error caused by the user's input, with a message that says what to do."""


class ConfigError(CselabError):
    """Invalid configuration (names the offending key)."""


class DataError(CselabError):
    """Missing, empty, truncated or corrupt input data (names the file and the fix)."""


class ModelError(CselabError):
    """A model that cannot be resolved or loaded."""


class TrackingError(CselabError):
    """The MLflow tracking server cannot be reached (names the server and the ways out)."""
