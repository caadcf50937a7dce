import Foundation
import LedgerCrypto
import LedgerStore

/// Every subcommand, in the order `ledger --help` lists them.
let commands: [any Subcommand.Type] = [
    InitCommand.self, SubmitCommand.self, BindingCommand.self, AccountCommand.self, LogCommand.self, VerifyCommand.self,
    RebuildCommand.self, StatsCommand.self, InspectJWSCommand.self, BenchCommand.self, DemoCommand.self,
    ReplayCommand.self, ExplainCommand.self, CheckpointCommand.self, SigningKeyCommand.self, DisputeCommand.self,
    SupportCommand.self, AuditCommand.self, EvidenceCommand.self, CompactCommand.self, UpgradeCommand.self, ServeCommand.self, AppleCommand.self,
    MigrateCommand.self,
]

@MainActor func overview() -> String {
    var lines = [
        "ledger: decide and prove which app account owns an App Store subscription.", "",
        "Usage: ledger COMMAND [OPTIONS]   (every command takes --store DIR, default ./ledger-data, or",
        "                                  --store postgres://… (docs/scale-out.md); and --keys DIR, the",
        "                                  directory of the key files, default the store directory (docs/keys.md))",
        "", "Commands:",
    ]
    for command in commands { lines.append("  " + command.name.padding(toLength: 12, withPad: " ", startingAt: 0) + command.abstract) }
    lines += [
        "", "Run `ledger COMMAND --help` for a command's options. Exit codes: 0 success, 1 verification failed,",
        "2 usage error, 3 store error (missing, key file, newer format, corrupt), 4 App Store Server API failed.",
    ]
    return lines.joined(separator: "\n")
}

let console = Console()
var argv = Array(CommandLine.arguments.dropFirst())
guard let name = argv.first, !["--help", "-h", "help"].contains(name) else {
    console.out(overview())
    exit(argv.isEmpty ? ExitCode.usage.rawValue : 0)
}
argv.removeFirst()
guard let command = commands.first(where: { $0.name == name }) else {
    console.err("error: unknown command \(name)\n\n" + overview())
    exit(ExitCode.usage.rawValue)
}
if argv.contains("--help") || argv.contains("-h") {
    console.out(command.usage)
    exit(0)
}
do {
    let arguments = try Arguments(
        argv, options: command.options.union(["store", "keys", "read-store"]), flags: command.flags, repeatable: command.repeatable,
        positionals: command.positionals)
    exit(try command.run(arguments, console: console).rawValue)
} catch let error as CLIError {
    console.err("error: \(error.message)")
    if error.code == .usage { console.err("Run `ledger \(name) --help` for usage.") }
    exit(error.code.rawValue)
} catch let error as LedgerStoreError {
    console.err("error: \(error)")
    exit(ExitCode.storeError.rawValue)
} catch let error as CryptoError {
    console.err("error: libcrypto failed: \(error) (check the OpenSSL installation and OPENSSL_CONF)")
    exit(ExitCode.storeError.rawValue)
} catch {
    console.err("error: \(error)")
    exit(ExitCode.storeError.rawValue)
}
