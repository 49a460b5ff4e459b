"""What every front end shows: JSON-ready views, text formats, redaction, queue rows."""
