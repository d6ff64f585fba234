// Command runattempt is the runattempt task function of the onejob state
// machine: the only one that calls providers and checks their answers.
package main

import (
	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/providerconfig"
	"github.com/onejob/onejob/internal/worker"
)

func main() {
	app.ServeTask(providerconfig.RunDeps, func(w *worker.Worker) any { return w.RunAttemptHandler })
}
