"""A stand-in Arena server and its fixtures, for testing agile's Arena client offline."""
