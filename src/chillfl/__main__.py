from chillfl.cli import main

raise SystemExit(main())
