import Foundation

/// LMDB reads `data.mdb` through a memory map and trusts its pages, which carry no checksums: a
/// page damaged on disk can make it read outside the map (SIGBUS, SIGSEGV) or fail one of its own
/// assertions (SIGABRT). ``install(arguments:)`` makes such a stop a store error (exit 3) that says
/// so, instead of a crash report, for commands on a store directory (a PostgreSQL store has no
/// data.mdb: there a crash stays a crash). The same signals from a bug look alike, so the message
/// sends the operator to `verify` before any restore. The message is made before any signal can
/// arrive: the handler only writes it.
enum DamagedStoreStop {
    static func install(arguments: [String]) {
        let stores = arguments + [ProcessInfo.processInfo.environment["LEDGER_STORE"] ?? ""]
        guard !stores.contains(where: { $0.hasPrefix("postgres://") || $0.hasPrefix("postgresql://") }) else { return }
        for (signal, name) in [(SIGBUS, "SIGBUS"), (SIGSEGV, "SIGSEGV"), (SIGABRT, "SIGABRT")] {
            let text =
                "error: ledger stopped on \(name) while reading the store. First check that the disk holding it is not full "
                + "(`df`): LMDB stops this way when it cannot extend lock.mdb (a store just restored, or copied without it); free "
                + "space and run the command again, the store is then intact. Otherwise its data.mdb is most likely damaged (LMDB "
                + "trusts its pages, which carry no checksums) or was changed while in use. Run `ledger verify` on it; if it "
                + "reports the store damaged (exit 1 or 3), restore it from a backup (`ledger restore`, docs/operations.md). If "
                + "data.mdb is intact, this is a bug in ledger: please report it with the command line.\n"
            let message = strdup(text)
            switch signal {
            case SIGBUS: busMessage = message
            case SIGSEGV: segvMessage = message
            default: abortMessage = message
            }
            var action = sigaction()
            action.__sigaction_handler.sa_handler = stopOnDamagedStore
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
    }
}

private nonisolated(unsafe) var busMessage: UnsafeMutablePointer<CChar>?
private nonisolated(unsafe) var segvMessage: UnsafeMutablePointer<CChar>?
private nonisolated(unsafe) var abortMessage: UnsafeMutablePointer<CChar>?

/// Async-signal-safe: writes the prepared message and exits with the store-error status.
private func stopOnDamagedStore(_ signal: Int32) {
    let message = signal == SIGBUS ? busMessage : signal == SIGSEGV ? segvMessage : abortMessage
    if let message { _ = write(2, message, strlen(message)) }
    _exit(3)
}
