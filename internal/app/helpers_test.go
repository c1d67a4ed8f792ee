package app

import "github.com/idemgate/idemgate/internal/testutil"

type syncBuffer = testutil.SyncBuffer
