import signal

from chillfl.cli import main

code = main()
# The command has finished and said its one line: a late SIGINT/SIGTERM/SIGHUP (a second Ctrl-C, a supervisor's
# repeated TERM) must not turn the exit into a kill by signal (exit -15 with nothing said) while the
# interpreter tears down (seen under load in tests/private_net/test_ray.py's double SIGTERM).
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
raise SystemExit(code)
