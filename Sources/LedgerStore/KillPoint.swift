import Foundation

/// **For tests only.** Named steps of long multi-step operations (`ledger upgrade`, `ledger restore`)
/// at which the process can be made to die as if killed, so tests can check what an interrupted run
/// leaves behind without `strace` fault injection.
///
/// When the environment variable ``variable`` (`LEDGER_TEST_KILL_AT`) names a step, the process sends
/// itself `SIGKILL` on reaching it: no cleanup, no `catch`, no `atexit` handler runs, exactly as with
/// `kill -9`. Unset (always, outside tests) it does nothing. The steps are listed in docs/testing.md.
package enum KillPoint {
    /// `LEDGER_TEST_KILL_AT`: the step to die at. Never set it on a production host.
    package static let variable = "LEDGER_TEST_KILL_AT"

    private static let chosen: String? = ProcessInfo.processInfo.environment[variable].flatMap { $0.isEmpty ? nil : $0 }

    /// Dies by `SIGKILL` when ``variable`` names `step`.
    package static func reached(_ step: String) {
        guard let chosen, chosen == step else { return }
        kill(getpid(), SIGKILL)
    }
}
