from dmn.cli import main

raise SystemExit(main())
