"""The golden corpus: the rationalizer against a frozen copy of its earlier rules."""
