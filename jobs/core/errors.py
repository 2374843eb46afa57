"""Errors a user can cause (bad path, bad CSV layout, bad argument, no GPU): the CLI prints the message as
one line and exits 2. The message names the cause and the fix. Raise them before anything is written."""


class UserError(Exception):
    pass
