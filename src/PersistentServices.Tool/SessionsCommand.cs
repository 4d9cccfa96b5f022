using System.Globalization;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;
using PersistentServices.Sessions;

namespace PersistentServices.Tool;

/// <summary>
/// <c>psctl sessions list|show|discard|release</c>: the operator's view and repair of a stopped service's sessions
/// (docs/operations.md, "Operator repair"). The log is opened as the service's recovery opens it (<see cref="OfflineLog"/>);
/// discard and release append the records the admin endpoints append on a running service (<see cref="QuarantineRepair"/>),
/// so the next start sees the session ended or released.
/// </summary>
internal static class SessionsCommand
{
    public const string Usage = """
          psctl sessions list <log-directory> [--state STATE] [--kind session|key]
          psctl sessions show <log-directory> <tag-or-id> [--bodies] [--limit N]
          psctl sessions discard <log-directory> <tag-or-id>
          psctl sessions release <log-directory> <tag-or-id>

        The sessions of a STOPPED service's log: the log is opened as the service's start opens it (the same checks, a torn
        tail after the last commit truncated as that start would) and refused while a process holds it (directory.lock);
        on a running service use its admin endpoints (MapPersistentServicesAdmin). A session is named by its trace tag
        (12 hex digits, as the list and the service's logs show it) or by its id (an id may begin with '-'; '--' ends the
        options).

          list     every live session: trace tag, kind (session, or key for an Idempotency-Key), state (live, never-used,
                   quarantined and why, expired-key), last request number, owner hash (its first 6 bytes; anonymous),
                   bytes held, requests the next start replays, last activity. --state and --kind filter.
          show     one session and its logged records (requests: method, path, sizes; replies: status; checkpoints; for a
                   quarantined session every record of it the log still holds). Bodies and query strings only with
                   --bodies (they may hold secrets); --limit caps the records listed (default 1000).
          discard  ends a quarantined session: its client's requests get 404. A quarantined Idempotency-Key becomes an
                   expired key instead (410 idempotency-key-expired), so its operation never runs again.
          release  lets a quarantined session serve again with no state: a retry of its last request gets 410
                   session-released, its next request runs. A key becomes an expired key, as with discard.

          --page-size-bits N, --segment-size-bits N   only for a log whose commit.meta does not record them
          --key-file <file>      a key of an encrypted log (PersistentServicesOptions.Log.Encryption): a file holding it
                                 in base64, as the service's configuration does; repeat for previous keys still in use.
                                 discard and release seal their record with the FIRST key given: give the service's
                                 current key first (they refuse a first key that is not the one the log's newest sealed
                                 record is sealed with, and a key for a log with no sealed record).
                                 Or PSCTL_LOG_KEYS=<base64>[,<base64>...] in the environment.

        Exit status: 0 done (a repair is reported done only once the log, reopened as the service opens it, shows it);
                     1 refused, nothing changed (no such session, two share the tag, not quarantined, the first key given is
                     not the one the log's newest sealed record is sealed with); 2 the log could not be opened (usage, missing
                     or not a log directory, in use, damaged: see psctl verify); 3 the repair was written but reopening the
                     log as the service would failed: do not start the service before psctl verify passes.
        """;

    private const int DefaultRecords = 1000;

    public static int Run(string[] args, TextWriter output, TextWriter error, Func<string, string?>? environment = null)
    {
        environment ??= Environment.GetEnvironmentVariable;
        if (args is [] or ["-h" or "--help" or "help", ..])
        {
            output.WriteLine(Usage);
            return args.Length == 0 ? Cli.CannotCheck : Cli.Clean;
        }

        var command = args[0];
        if (command is not ("list" or "show" or "discard" or "release"))
        {
            return UsageError(error, $"unknown command 'sessions {command}'");
        }

        var positional = new List<string>();
        string? state = null, kind = null;
        int? pageSizeBits = null, segmentSizeBits = null;
        var bodies = false;
        var limit = DefaultRecords;
        var keyArguments = new LogKeyArguments();
        for (var i = 1; i < args.Length; i++)
        {
            if (keyArguments.TryTake(args, ref i))
            {
                continue;
            }

            switch (args[i])
            {
                case "--state" when command == "list" && i + 1 < args.Length && SessionInspection.States.Contains(args[i + 1]):
                    state = args[++i];
                    break;
                case "--kind" when command == "list" && i + 1 < args.Length && SessionInspection.Kinds.Contains(args[i + 1]):
                    kind = args[++i];
                    break;
                case "--bodies" when command == "show":
                    bodies = true;
                    break;
                case "--limit" when command == "show" && i + 1 < args.Length && TryNumber(args[i + 1], 1, 1_000_000, out var records):
                    limit = records;
                    i++;
                    break;
                case "--page-size-bits" when i + 1 < args.Length && TryNumber(args[i + 1], 1, 64, out var page):
                    pageSizeBits = page;
                    i++;
                    break;
                case "--segment-size-bits" when i + 1 < args.Length && TryNumber(args[i + 1], 1, 64, out var segment):
                    segmentSizeBits = segment;
                    i++;
                    break;
                case "--":
                    positional.AddRange(args[(i + 1)..]); // everything after "--" is positional
                    i = args.Length;
                    break;
                case var other when !other.StartsWith('-') || SessionId.TryParse(other, out _):
                    // A session id is base64url, whose alphabet has '-': "-g3bY9N05ZwL177HfjiXIQ" is an id, not an option.
                    positional.Add(other);
                    break;
                default:
                    return UsageError(error, $"unexpected argument '{LogKeyArguments.Shown(args[i])}' for 'sessions {command}'" +
                        (args[i] is "--state" ? $" (states: {string.Join(", ", SessionInspection.States)})" : args[i] is "--kind" ? " (kinds: session, key)" : ""));
            }
        }

        var wanted = command == "list" ? 1 : 2;
        if (positional.Count != wanted)
        {
            return UsageError(error, command == "list"
                ? "give the log directory (PersistentServicesOptions.LogDirectory of the stopped service)"
                : $"give the log directory and the session's trace tag or id: psctl sessions {command} <log-directory> <tag-or-id>");
        }

        if (LogKeyArguments.Shown(positional[0]) != positional[0] && !Directory.Exists(positional[0]))
        {
            error.WriteLine($"psctl sessions {command}: the log directory given does not exist and looks like a key (not shown): give keys only with --key-file or " +
                $"{LogKeyArguments.EnvironmentVariable}.");
            return Cli.CannotCheck;
        }

        LogEncryptionOptions? keys = null;
        try
        {
            keys = ForWriting(keyArguments.Read(environment));
            return RunAsync(command, positional[0], positional.ElementAtOrDefault(1), state, kind, bodies, limit, pageSizeBits, segmentSizeBits, keys, output, error)
                .GetAwaiter().GetResult();
        }
        catch (LogEncryptionKeyException ex)
        {
            error.WriteLine(
                $"psctl sessions {command}: the log is encrypted and cannot be opened without its key: the record at LSN {ex.Address} is sealed with key id {ex.KeyId}, " +
                $"and {LogKeyArguments.Describe(keys is null ? null : Describe(keys))}. Give the key the service writes with first (and any previous key still in use): " +
                $"--key-file <file> (the key in base64, as in the service's configuration), or {LogKeyArguments.EnvironmentVariable}. Nothing was changed.");
            return Cli.CannotCheck;
        }
        catch (OfflineLogRefusedException ex)
        {
            error.WriteLine($"psctl sessions {command}: {ex.Message}");
            return Cli.CannotCheck;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ArgumentException or LogCorruptionException or LogFormatException or LogFaultedException)
        {
            error.WriteLine($"psctl sessions {command}: the log could not be opened: {ex.Message}");
            if (ex is LogCorruptionException)
            {
                error.WriteLine("The service would refuse to start on it too; 'psctl verify' lists every problem. Nothing was changed.");
            }

            return Cli.CannotCheck;
        }
    }

    /// <summary>
    /// The keys given as the log opens them: the first is the one a discard or release seals its record with (the
    /// service's current key, given first), the others are read only. Null when none was given.
    /// </summary>
    private static LogEncryptionOptions? ForWriting(LogEncryptionOptions? given)
    {
        if (given is null)
        {
            return null;
        }

        var keys = new LogEncryptionOptions { Key = given.PreviousKeys[0] };
        foreach (var previous in given.PreviousKeys.Skip(1))
        {
            keys.PreviousKeys.Add(previous);
        }

        return keys;
    }

    /// <summary>Every key of <paramref name="keys"/> as a read-only list, for <see cref="LogKeyArguments.Describe"/>.</summary>
    private static LogEncryptionOptions Describe(LogEncryptionOptions keys)
    {
        var all = new LogEncryptionOptions();
        foreach (var key in keys.PreviousKeys.Prepend(keys.Key!))
        {
            all.PreviousKeys.Add(key);
        }

        return all;
    }

    private static async Task<int> RunAsync(string command, string directory, string? reference, string? state, string? kind, bool bodies, int limit,
        int? pageSizeBits, int? segmentSizeBits, LogEncryptionOptions? keys, TextWriter output, TextWriter error)
    {
        var log = await OfflineLog.OpenAsync(directory, pageSizeBits, segmentSizeBits, keys, new ErrorLogger(error), CancellationToken.None).ConfigureAwait(false);
        Session session;
        RepairAction action;
        string reason;
        long lsn;
        try
        {
            if (command == "list")
            {
                List(log, state, kind, output);
                return Cli.Clean;
            }

            if (Find(log, reference!, command, error) is not { } found)
            {
                return Cli.Refused;
            }

            session = found;
            if (command == "show")
            {
                var history = await SessionInspection.ReadHistoryAsync(log.Log, session, SessionInspection.HistoryStart(log.Log, session), bodies, limit, CancellationToken.None)
                    .ConfigureAwait(false);
                SessionsReport.WriteShow(session, reference!.Length == SessionId.TextLength, history, bodies, output);
                return Cli.Clean;
            }

            action = command == "discard" ? RepairAction.Discard : RepairAction.Release;
            if (session.QuarantineReason is not { } quarantined)
            {
                error.WriteLine(
                    $"psctl sessions {command}: session {session.TraceTag} is {SessionInspection.StateOf(session, offline: true)}, not quarantined: only a quarantined session can be " +
                    $"{(command == "discard" ? "discarded" : "released")}. Nothing was changed.");
                return Cli.Refused;
            }

            reason = quarantined;
            if (await SealingKeyProblemAsync(log.Log, keys).ConfigureAwait(false) is { } problem)
            {
                error.WriteLine($"psctl sessions {command}: {problem} Nothing was changed.");
                return Cli.Refused;
            }

            lsn = QuarantineRepair.AppendOffline(log.Log, session, action, TimeProvider.System.GetUtcNow());
            await log.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
        }
        finally
        {
            await log.DisposeAsync().ConfigureAwait(false);
        }

        // What psctl wrote is checked as the next start reads it: the log reopened with the keys given (its checks, the
        // analysis scan), and the session ended or no longer quarantined. Only then is the repair reported done.
        if (await CheckRepairAsync(directory, pageSizeBits, segmentSizeBits, keys, session.Id, error).ConfigureAwait(false) is { } failed)
        {
            error.WriteLine(
                $"psctl sessions {command}: the record was written at LSN {lsn}, but reopening the log as the service would failed: {failed} Do not start the " +
                "service on this log before 'psctl verify' passes on it (docs/operations.md, \"Operator repair\").");
            return Cli.NotConfirmed;
        }

        SessionsReport.WriteRepair(session, action, QuarantineRepair.OutcomeOf(session, action), reason, lsn, Path.GetFullPath(directory), output);
        return Cli.Clean;
    }

    /// <summary>
    /// Why psctl must not seal a record with the first key given (null when it may): the service reads a sealed record only
    /// with a key it is configured with, and a key the log's newest sealed record was not sealed with may be one it does not
    /// have (the next start then stops on psctl's record: "key id ... not among the configured log keys"). The log's newest
    /// sealed record names the key the service wrote with last; psctl seals with that key or not at all. A log with no sealed
    /// record is written in clear, and so is what psctl appends to it when no key is given.
    /// </summary>
    internal static async Task<string?> SealingKeyProblemAsync(DurableLog log, LogEncryptionOptions? keys)
    {
        if (keys?.Key is not { } first)
        {
            return null; // no key given: the log opened, so it holds no sealed record psctl read; its record is in clear too
        }

        uint? newest = null;
        long newestLsn = -1;
        await foreach (var record in log.ScanAsync(log.BeginAddress).ConfigureAwait(false))
        {
            if (record.Header.KeyId is { } id)
            {
                newest = id;
                newestLsn = record.Lsn;
            }
        }

        var sealing = LogKey.IdOf(LogEncryptionOptions.Decode(first, "the first key given"));
        if (newest is not { } wanted)
        {
            return $"the log holds no sealed record, so psctl cannot tell which key the service is configured with: a record sealed with the first key given " +
                $"(id {LogKey.Format(sealing)}) would stop a service that does not have it. Give no key (--key-file, {LogKeyArguments.EnvironmentVariable}): the record is " +
                "then written in clear, as the log's others are.";
        }

        if (sealing == wanted)
        {
            return null;
        }

        var given = keys.PreviousKeys.Prepend(first).Select(k => LogKey.IdOf(LogEncryptionOptions.Decode(k, "a key given"))).ToList();
        var position = given.IndexOf(wanted);
        return $"the first key given (id {LogKey.Format(sealing)}) is the one psctl seals its record with, but the log's newest sealed record (LSN {newestLsn}) is sealed " +
            $"with key id {LogKey.Format(wanted)}: a service configured with that key and not with {LogKey.Format(sealing)} would refuse to start on psctl's record. " +
            (position > 0
                ? $"The key given in position {position + 1} has id {LogKey.Format(wanted)}: give it first."
                : $"None of the keys given has id {LogKey.Format(wanted)}: give the key the service writes with first.");
    }

    /// <summary>
    /// Reopens the log as the service's next start opens it (<see cref="OfflineLog"/>: its checks and its analysis scan, the
    /// same keys) and checks that session <paramref name="id"/> is no longer quarantined. Null when it holds; else why not.
    /// </summary>
    private static async Task<string?> CheckRepairAsync(string directory, int? pageSizeBits, int? segmentSizeBits, LogEncryptionOptions? keys, SessionId id, TextWriter error)
    {
        try
        {
            await using var reopened = await OfflineLog.OpenAsync(directory, pageSizeBits, segmentSizeBits, keys, new ErrorLogger(error), CancellationToken.None)
                .ConfigureAwait(false);
            return SessionInspection.Find(reopened.Sessions, id.ToString(), out var session) == SessionMatch.Found && session!.QuarantineReason is not null
                ? $"session {session.TraceTag} is still quarantined after the repair."
                : null;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ArgumentException or LogCorruptionException or LogFormatException or
            LogFaultedException or LogEncryptionKeyException or OfflineLogRefusedException)
        {
            return ex.Message;
        }
    }

    private static void List(OfflineLog log, string? state, string? kind, TextWriter output)
    {
        var all = log.Sessions.Enumerate().Select(s => SessionInspection.Summarize(s, offline: true)).ToList();
        var listed = all.Where(s => (state is null || s.State == state) && (kind is null || s.Kind == kind))
            .OrderBy(s => s.Tag, StringComparer.Ordinal).ToList();
        SessionsReport.WriteList(log.Directory, all, listed, output);
    }

    private static Session? Find(OfflineLog log, string reference, string command, TextWriter error)
    {
        switch (SessionInspection.Find(log.Sessions, reference, out var session))
        {
            case SessionMatch.Found:
                return session;
            case SessionMatch.Ambiguous:
                error.WriteLine($"psctl sessions {command}: two sessions share the trace tag {reference}; name the session by its id.");
                return null;
            case SessionMatch.Malformed:
                error.WriteLine($"psctl sessions {command}: '{LogKeyArguments.Shown(reference)}' is neither a trace tag ({SessionInspection.TagLength} hex digits) nor a session id " +
                    $"({SessionId.TextLength} base64url characters).");
                return null;
            default:
                error.WriteLine($"psctl sessions {command}: no live session {reference} in this log ('psctl sessions list' lists them).");
                return null;
        }
    }

    private static bool TryNumber(string text, int min, int max, out int value)
        => int.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out value) && value >= min && value <= max;

    private static int UsageError(TextWriter error, string message)
    {
        error.WriteLine($"psctl: {message}.");
        error.WriteLine(Usage);
        return Cli.CannotCheck;
    }

    /// <summary>What the log's open reports (a torn tail truncated, metadata rebuilt), for the operator, on stderr.</summary>
    private sealed class ErrorLogger(TextWriter error) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state)
            where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Warning;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            if (IsEnabled(logLevel))
            {
                error.WriteLine($"psctl: {logLevel}: {formatter(state, exception)}");
            }
        }
    }
}
