// Command hedge is the hedge task function of the onejob state machine.
package main

import (
	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/worker"
)

func main() {
	app.ServeTask(app.SchedulingDeps, func(w *worker.Worker) any { return w.HedgeHandler })
}
