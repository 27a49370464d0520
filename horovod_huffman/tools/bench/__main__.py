import sys

from horovod_huffman.tools.bench.run import main

sys.exit(main())
