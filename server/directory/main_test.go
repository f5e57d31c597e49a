package directory

import (
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
