"""`trace`'s analysis, by concern: which frames are the program's own (frames.py), what a site is
called (sites.py), the trace as the probe reports it (records.py), the summary per allocation and
touching site (summary.py), and advice (advice.py). Each is imported by its own name."""
