"""`python -m mbexp.study NAME`: a declared study, end to end (mbexp.study.command)."""

from mbexp.study.command import main

if __name__ == "__main__":
    main()
