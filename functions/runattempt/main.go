// Command runattempt is the runattempt task function of the onejob state machine.
package main

import (
	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/worker"
)

func main() {
	app.ServeTask(true, func(w *worker.Worker) any { return w.RunAttemptHandler })
}
