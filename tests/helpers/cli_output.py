"""What a refused ``rlvr train`` printed: its one line of error, checked to be one line and no traceback."""


def one_error_line(capsys) -> str:
    """The ``rlvr train: ...`` error line of the captured stderr (asserting there is no traceback and no second line)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    message = err[err.rindex("rlvr train: "):].rstrip("\n")
    assert "\n" not in message, message
    return message
