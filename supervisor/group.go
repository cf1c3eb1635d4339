package supervisor

import "os"

// hostName is this process's host name, for its record.
var hostName, _ = os.Hostname()
