package budget_test

import (
	"testing"

	"github.com/sluice-dev/sluice/budget"
	"github.com/sluice-dev/sluice/budget/budgettest"
)

func TestLocal(t *testing.T) {
	budgettest.Run(t, func(*testing.T) budget.Budget { return budget.NewLocal() })
}
