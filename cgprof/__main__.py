"""`python -m cgprof`."""

from cgprof.cli import main

if __name__ == "__main__":
    main()
