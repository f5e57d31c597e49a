package node

import (
	"testing"

	"github.com/heraldrt/herald/storage/testpg"
)

// TestMain stops the PostgreSQL server of the tests that use one.
func TestMain(m *testing.M) { testpg.Main(m) }
