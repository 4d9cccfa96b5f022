using System.Globalization;
using PersistentServices.Tool;

// psctl: the operator's tool for a PersistentServices log directory (docs/operations.md).
//   psctl verify <log-directory> [--page-size-bits N] [--segment-size-bits N] [--key-file FILE ...]
//   psctl replay-check --log <log-directory> [options] -- <command> [arguments...]
//   psctl sessions list|show|discard|release <log-directory> [<tag-or-id>] [options]   (a stopped service's sessions)
//   psctl replication status|promote|switchover <node-url> [options]   (a replicated service's node)
// Exit status: 0 the service would open the log / every session replayed fine; 1 it would refuse / a session diverged;
// 2 the log could not be checked (usage, missing directory, unreadable files, no report).
return Cli.Run(args, Console.Out, Console.Error, progress: ConsoleProgressDisplay.ForStandardError());

namespace PersistentServices.Tool
{
    /// <summary>The command line: parses the arguments, runs a command, returns the exit status.</summary>
    internal static class Cli
    {
        public const int Clean = 0;
        public const int Refused = 1;
        public const int CannotCheck = 2;

        /// <summary>A repair was written, but the log reopened as the service would open it does not show it (psctl sessions).</summary>
        public const int NotConfirmed = 3;

        private static readonly string Usage = $"""
            psctl: the operator's tool for a PersistentServices log directory.

            Usage:
              psctl verify <log-directory> [--page-size-bits N] [--segment-size-bits N] [--key-file <file> ...]
              psctl replay-check --log <log-directory> [options] -- <command> [arguments...]   (psctl replay-check --help)
              psctl sessions list|show|discard|release <log-directory> [<tag-or-id>] [options]  (psctl sessions --help)
              psctl replication status|promote|switchover <node-url> [options]   (psctl replication --help)

            verify runs the checks the service runs before it opens its log, without starting a service and without
            writing anything (no lock taken, no file created, no torn tail truncated), and reports the committed range,
            the number of records, sessions and shared values, and every problem the service would refuse to start on.
            The page and segment sizes are read from the commit metadata; give them only for a log written by a build
            that did not record them, if the service changed PersistentServicesOptions.Log.
            An encrypted log (PersistentServicesOptions.Log.Encryption) is read with its keys:
            {LogKeyArguments.Help}

            Exit status: 0 the service would open this log; 1 it would refuse to (every problem is listed);
                         2 the log could not be checked.
            Taking a consistent copy of a running service's log, restoring it: docs/operations.md.
            """;

        /// <param name="args">The command line.</param>
        /// <param name="output">The report: what scripts read.</param>
        /// <param name="error">Errors and usage.</param>
        /// <param name="environment">The environment variables (keys).</param>
        /// <param name="progress">Shows long steps while they run (psctl: on standard error, only on a terminal); none by default.</param>
        public static int Run(string[] args, TextWriter output, TextWriter error, Func<string, string?>? environment = null, IProgressDisplay? progress = null)
        {
            environment ??= Environment.GetEnvironmentVariable;
            progress ??= NoProgressDisplay.Instance;
            if (args is [] or ["-h" or "--help" or "help", ..])
            {
                output.WriteLine(Usage);
                return args.Length == 0 ? CannotCheck : Clean;
            }

            if (args[0] == "replay-check")
            {
                if (args is [_, "-h" or "--help" or "help"])
                {
                    output.WriteLine(ReplayCheckCommand.Usage);
                    return Clean;
                }

                return ReplayCheckCommand.Run(args[1..], output, error, progress);
            }

            if (args[0] == "sessions")
            {
                return SessionsCommand.Run(args[1..], output, error, environment);
            }

            if (args[0] == "replication")
            {
                return ReplicationCommand.Run(args[1..], output, error, environment);
            }

            if (args[0] != "verify")
            {
                error.WriteLine($"psctl: unknown command '{args[0]}'.");
                error.WriteLine(Usage);
                return CannotCheck;
            }

            string? directory = null;
            int? pageSizeBits = null;
            int? segmentSizeBits = null;
            var keyArguments = new LogKeyArguments();
            for (var i = 1; i < args.Length; i++)
            {
                if (keyArguments.TryTake(args, ref i))
                {
                    continue;
                }

                switch (args[i])
                {
                    case "--page-size-bits" when i + 1 < args.Length && int.TryParse(args[i + 1], NumberStyles.None, CultureInfo.InvariantCulture, out var page):
                        pageSizeBits = page;
                        i++;
                        break;
                    case "--segment-size-bits" when i + 1 < args.Length && int.TryParse(args[i + 1], NumberStyles.None, CultureInfo.InvariantCulture, out var segment):
                        segmentSizeBits = segment;
                        i++;
                        break;
                    case var other when !other.StartsWith('-') && directory is null:
                        directory = other;
                        break;
                    default:
                        error.WriteLine($"psctl verify: unexpected argument '{LogKeyArguments.Shown(args[i])}'.");
                        error.WriteLine(Usage);
                        return CannotCheck;
                }
            }

            if (directory is null)
            {
                error.WriteLine("psctl verify: give the log directory (PersistentServicesOptions.LogDirectory of the service).");
                return CannotCheck;
            }

            if (LogKeyArguments.Shown(directory) != directory && !System.IO.Directory.Exists(directory))
            {
                error.WriteLine("psctl verify: the log directory given does not exist and looks like a key (not shown): give keys only with --key-file or " +
                    $"{LogKeyArguments.EnvironmentVariable}.");
                return CannotCheck;
            }

            LogEncryptionOptions? keys = null;
            try
            {
                keys = keyArguments.Read(environment);
                var walks = new Log.LogVerifyProgress();
                var verification = progress.Run(walks.Steps, () => Log.LogVerifier.Verify(directory, pageSizeBits, segmentSizeBits, keys, walks));
                VerifyReport.Write(verification, output);
                return verification.Refused ? Refused : Clean;
            }
            catch (LogEncryptionKeyException ex)
            {
                error.WriteLine(
                    $"psctl verify: the log is encrypted and cannot be checked without its key: the record at LSN {ex.Address} is sealed with key id {ex.KeyId}, " +
                    $"and {LogKeyArguments.Describe(keys)}. Give the key the service writes with (and any previous key still in use): " +
                    $"--key-file <file> (the key in base64, as in the service's configuration), or {LogKeyArguments.EnvironmentVariable}.");
                return CannotCheck;
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ArgumentException)
            {
                error.WriteLine($"psctl verify: the log could not be checked: {ex.Message}");
                return CannotCheck;
            }
        }
    }
}
