from placement.cli import main

raise SystemExit(main())
