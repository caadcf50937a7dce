import Foundation

/// The dispatcher's table: every subcommand, in the order `ledger --help` lists them. `main.swift`
/// runs the one named on the command line and `overview()` lists them all, so a command is in
/// `ledger --help` exactly when it can be run (`HelpTests` checks the list, and README.md's table).
@MainActor let commands: [any Subcommand.Type] = [
    InitCommand.self, SubmitCommand.self, BindingCommand.self, AccountCommand.self, LogCommand.self, VerifyCommand.self,
    RebuildCommand.self, StatsCommand.self, InspectJWSCommand.self, BenchCommand.self, DemoCommand.self,
    ReplayCommand.self, ExplainCommand.self, CheckpointCommand.self, SigningKeyCommand.self, DisputeCommand.self,
    SupportCommand.self, AuditCommand.self, EvidenceCommand.self, CompactCommand.self, UpgradeCommand.self, ServeCommand.self, AppleCommand.self,
    MigrateCommand.self, BackupCommand.self, RestoreCommand.self,
]

/// `ledger --help`: what the tool does, the options every command takes, one line per command, exit codes.
@MainActor func overview() -> String {
    var lines = [
        "ledger: decide and prove which app account owns an App Store subscription.", "",
        "Usage: ledger COMMAND [OPTIONS]   (every command takes --store DIR, default ./ledger-data, or",
        "                                  --store postgres://… (docs/scale-out.md); and --keys DIR, the",
        "                                  directory of the key files, default the store directory (docs/keys.md))",
        "", "Commands:",
    ]
    let width = max(12, (commands.map { $0.name.count }.max() ?? 0) + 1)
    for command in commands { lines.append("  " + command.name.padding(toLength: width, withPad: " ", startingAt: 0) + command.abstract) }
    lines += [
        "", "Run `ledger COMMAND --help` for a command's options. Exit codes: 0 success, 1 verification failed,",
        "2 usage error, 3 store error (missing, key file, newer format, corrupt), 4 App Store Server API failed.",
    ]
    return lines.joined(separator: "\n")
}
