"""The one error of the ``radiance check`` tool's inputs."""


class CheckInputError(Exception):
    """A user-facing problem with the inputs of ``radiance check`` (shown without a traceback)."""
