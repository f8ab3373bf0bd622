package core

import (
	"context"
	"testing"
	"time"
)

// fakeBackend is a MetadataBackend that declares caps; only Capabilities
// is ever called.
type fakeBackend struct {
	MetadataBackend
	caps Capabilities
}

func (f fakeBackend) Capabilities() Capabilities { return f.caps }

// leasingBackend implements LeaseManager.
type leasingBackend struct{ fakeBackend }

func (leasingBackend) GrantLease(context.Context, string, time.Duration, Fence) (int64, error) {
	return 7, nil
}
func (leasingBackend) RenewLease(context.Context, int64) error         { return nil }
func (leasingBackend) RevokeLease(context.Context, int64, Fence) error { return nil }

// wrapper is a decorator: the required contract and Unwrap only.
type wrapper struct{ MetadataBackend }

func (w wrapper) Unwrap() MetadataBackend { return w.MetadataBackend }

// TestOptionalHonoursDeclarationsAndUnwrap: a part is found when a backend
// in the Unwrap chain implements and declares it; implementing without
// declaring, or declaring without implementing, finds nothing.
func TestOptionalHonoursDeclarationsAndUnwrap(t *testing.T) {
	declared := leasingBackend{fakeBackend{caps: Capabilities{Leases: true}}}
	undeclared := leasingBackend{fakeBackend{caps: Capabilities{}}}
	claimsOnly := fakeBackend{caps: Capabilities{Leases: true}}
	tests := []struct {
		name string
		b    MetadataBackend
		want bool
	}{
		{"implemented and declared", declared, true},
		{"implemented, not declared", undeclared, false},
		{"declared, not implemented", claimsOnly, false},
		{"behind two wrappers", wrapper{wrapper{declared}}, true},
		{"undeclared behind a wrapper", wrapper{undeclared}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lm, ok := Optional[LeaseManager](tt.b)
			if ok != tt.want {
				t.Fatalf("Optional[LeaseManager] = %v, want %v", ok, tt.want)
			}
			if ok {
				if id, _ := lm.GrantLease(context.Background(), "x", time.Second, Fence{}); id != 7 {
					t.Errorf("the part found is not the backend's: lease %d", id)
				}
			}
		})
	}
	if _, ok := Optional[SessionExpirer](wrapper{declared}); ok {
		t.Error("found a SessionExpirer nobody implements")
	}
	// A part core has no capability for is found by its methods alone.
	type granter interface {
		GrantLease(context.Context, string, time.Duration, Fence) (int64, error)
	}
	if _, ok := Optional[granter](wrapper{undeclared}); !ok {
		t.Error("an interface without a capability was not found by its methods")
	}
}
