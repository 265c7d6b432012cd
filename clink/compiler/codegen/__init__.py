"""Physical plan → the text of a generated Python module."""
