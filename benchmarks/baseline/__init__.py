"""A benchmark-only app: the plain ORM row that record_intent is measured against."""
