package servers

// What the external tests (managed_test.go) use of the package's insides.
var (
	LeasedDirName      = leasedDirName
	LeaseDirName       = leaseDirName
	PostgresCredential = postgresCredential
	RemoveSysvShm      = removeSysvShm
	Alive              = alive
)
