"""The teacher's files: the key, the rubrics and the fixed loss of exercise 6 (not in the
student copy)."""
