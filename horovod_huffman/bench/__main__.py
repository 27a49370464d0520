import sys

from horovod_huffman.bench.run import main

sys.exit(main())
