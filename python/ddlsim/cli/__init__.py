"""The command line (`ddlsim <verb>`): the top layer, beside the Python API."""

from .app import app, main

__all__ = ["app", "main"]
