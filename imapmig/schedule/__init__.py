"""
Scheduling: what runs when, under which limits (L{throttle}: rates and
daily budgets).
"""
