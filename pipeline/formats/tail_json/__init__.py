"""walcast's own JSON lines (``--format json``): the parser (``decode``)."""
