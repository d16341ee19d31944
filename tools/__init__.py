"""Maintainer tools: the release build and its checks (release.py)."""
