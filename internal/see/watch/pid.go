package watch

import "os"

// pid is this process's id, written in each segment's run record.
var pid = os.Getpid()
