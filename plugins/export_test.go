package plugins

import "time"

// SetHostResignTimeout sets the bound of the host's waits in Resign for
// one test; the returned function restores it.
func SetHostResignTimeout(d time.Duration) (restore func()) {
	old := hostResignTimeout
	hostResignTimeout = d
	return func() { hostResignTimeout = old }
}

// WithoutAutoMTLS returns o with go-plugin's automatic mTLS turned off
// (the plugin-boundary benchmark's comparison).
func WithoutAutoMTLS(o LaunchOptions) LaunchOptions {
	o.noAutoMTLS = true
	return o
}
