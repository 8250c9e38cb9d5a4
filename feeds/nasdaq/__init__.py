"""Nasdaq: ITCH 5.0 files (itch:FILE), MoldUDP64 (moldudp64://), the ITCH writer and a MoldUDP64 server."""
