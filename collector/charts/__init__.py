"""How a chart lays out what it shows, shared by the report and the plots."""
