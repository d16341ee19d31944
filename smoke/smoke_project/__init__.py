"""A deployment-shaped Django project around the installed runledger-django wheel."""
