// @ts-check
// What an operator does to the open job: resolve an unknown attempt, or
// cancel the job; each with a reason, a review and a confirmation.

/** @typedef {import("./page.mjs").Attempt} Attempt */
/** @typedef {import("./page.mjs").Page} Page */

/**
 * Wires the job's actions.
 * @param {Page} page
 */
export function wireJobActions(page) {
  const { state, $, area, button, form, api, say, showProblem, clearProblem, fieldError } = page;
  // Calls into the other parts of the page (bound by boot once every part is wired).
  const refreshQueues = (/** @type {{more?: string}} */ o = {}) => page.calls.refreshQueues(o);
  const reloadOpen = () => page.calls.reloadOpen();

  /** @type {{attempt: number, outcome: string, reason: string, result?: unknown} | null} */
  let pendingResolve = null;

  function closeForms() {
    for (const id of ["resolve-form", "cancel-form"]) {
      $(id).hidden = true;
    }
    pendingResolve = null;
  }

  /** @param {Attempt} a */
  function openResolve(a) {
    closeForms();
    const f = form("resolve-form");
    f.reset();
    f.dataset.attempt = String(a.number);
    $("resolve-n").textContent = `${a.number} (${a.provider})`;
    $("resolve-key").textContent = `${state.open?.job.id}/${a.number}`;
    showResolveStep("edit");
    syncOutcome();
    fieldError("resolve-reason", "");
    fieldError("resolve-result", "");
    f.hidden = false;
    area("resolve-reason").focus();
  }

  /** @param {"edit" | "confirm"} step */
  function showResolveStep(step) {
    $("resolve-edit").hidden = step !== "edit";
    $("resolve-confirm").hidden = step !== "confirm";
  }

  function outcomeChoice() {
    const checked = form("resolve-form").querySelector('input[name="outcome"]:checked');
    return checked instanceof HTMLInputElement ? checked.value : "failed";
  }

  function syncOutcome() {
    $("resolve-result-field").hidden = outcomeChoice() !== "succeeded";
  }

  form("resolve-form").addEventListener("change", syncOutcome);
  form("resolve-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const n = Number(form("resolve-form").dataset.attempt);
    const outcome = outcomeChoice();
    const reason = area("resolve-reason").value.trim();
    fieldError("resolve-reason", reason ? "" : "Say why: the reason is recorded with the resolution.");
    /** @type {unknown} */
    let result;
    let resultOK = true;
    fieldError("resolve-result", "");
    if (outcome === "succeeded") {
      try {
        result = JSON.parse(area("resolve-result").value);
        if (typeof result !== "object" || result === null || Array.isArray(result)) {
          throw new Error("not an object");
        }
      } catch {
        resultOK = false;
        fieldError("resolve-result", "The result must be a JSON object, e.g. {\"text\": \"…\"}.");
      }
    }
    if (!reason) {
      area("resolve-reason").focus();
      return;
    }
    if (!resultOK) {
      area("resolve-result").focus();
      return;
    }
    pendingResolve = { attempt: n, outcome, reason, ...(outcome === "succeeded" ? { result } : {}) };
    $("resolve-summary").textContent = `Resolve attempt ${n} of ${state.open?.job.id} as ${outcome}` +
      `${outcome === "succeeded" ? " with the result given" : ""}, because: “${reason}”. ` +
      (outcome === "failed" ? "The job then goes on with its next provider, if one is left. " : "") +
      (outcome === "cancelled" ? "The job is then cancelled. " : "") + "This cannot be undone.";
    showResolveStep("confirm");
    button("resolve-confirm-button").focus();
  });
  button("resolve-back").addEventListener("click", () => {
    pendingResolve = null;
    showResolveStep("edit");
    area("resolve-reason").focus();
  });
  button("resolve-abort").addEventListener("click", closeForms);
  button("resolve-confirm-button").addEventListener("click", async () => {
    const open = state.open;
    const p = pendingResolve;
    if (!open || !p) {
      return;
    }
    const b = button("resolve-confirm-button");
    b.disabled = true;
    try {
      /** @type {Record<string, unknown>} */
      const body = { outcome: p.outcome, reason: p.reason };
      if (p.result !== undefined) {
        body.result = p.result;
      }
      await api("POST", `v1/jobs/${encodeURIComponent(open.job.id)}/attempts/${p.attempt}/resolve`, { body });
      closeForms();
      clearProblem();
      say(`Attempt ${p.attempt} of ${open.job.id} resolved as ${p.outcome}.`);
      await reloadOpen();
      void refreshQueues();
    } catch (err) {
      const problem = showProblem(err, `Resolving attempt ${p.attempt} of ${open.job.id}`);
      // Field errors go back to the fields they name.
      showResolveStep("edit");
      const at = (/** @type {(p: string) => boolean} */ match) => (problem.errors ?? [])
        .filter((e) => e.pointer !== undefined && match(e.pointer)).map((e) => `${e.pointer}: ${e.detail ?? ""}`).join("; ");
      fieldError("resolve-result", at((ptr) => ptr.startsWith("/result")));
      fieldError("resolve-reason", at((ptr) => ptr === "/reason"));
    } finally {
      b.disabled = false;
    }
  });

  let cancelReason = "";
  button("cancel-open").addEventListener("click", () => {
    closeForms();
    const f = form("cancel-form");
    f.reset();
    $("cancel-edit").hidden = false;
    $("cancel-confirm").hidden = true;
    fieldError("cancel-reason", "");
    f.hidden = false;
    area("cancel-reason").focus();
  });
  form("cancel-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    cancelReason = area("cancel-reason").value.trim();
    fieldError("cancel-reason", cancelReason ? "" : "Say why the job is cancelled.");
    if (!cancelReason) {
      area("cancel-reason").focus();
      return;
    }
    $("cancel-summary").textContent = `Cancel job ${state.open?.job.id}, because: “${cancelReason}”. ` +
      "Its open attempts are abandoned and no other runs. This cannot be undone.";
    $("cancel-edit").hidden = true;
    $("cancel-confirm").hidden = false;
    button("cancel-confirm-button").focus();
  });
  button("cancel-back").addEventListener("click", () => {
    $("cancel-edit").hidden = false;
    $("cancel-confirm").hidden = true;
  });
  button("cancel-abort").addEventListener("click", closeForms);
  button("cancel-confirm-button").addEventListener("click", async () => {
    const open = state.open;
    if (!open || !cancelReason) {
      return;
    }
    const b = button("cancel-confirm-button");
    b.disabled = true;
    try {
      await api("POST", `v1/jobs/${encodeURIComponent(open.job.id)}/cancel`, { body: { reason: cancelReason } });
      closeForms();
      clearProblem();
      say(`Job ${open.job.id} cancelled.`);
      await reloadOpen();
      void refreshQueues();
    } catch (err) {
      showProblem(err, `Cancelling job ${open.job.id}`);
    } finally {
      b.disabled = false;
    }
  });

  return { closeForms, openResolve };
}
