"""perfweb's diagnostics engine: Kineto trace analysis (HTA-compatible) and the ranked fixes of
FIXES.md. Pure Python: no Django, no I/O in the rules. See recommender/README.md.
"""
