using Google.Protobuf;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// <c>psctl sessions</c> on a stopped log written record by record: what list and show report, that discard and release
/// append the records the admin endpoints append (the next recovery's analysis scan sees the session ended or released),
/// and that it refuses a log in use, a directory without a log, and a session that is not quarantined, changing nothing.
/// The whole cycle with a real service (quarantined by a divergent replay, repaired offline, checked from the client):
/// test/PersistentServices.ProcessTests/OperatorRepairTests.cs.
/// </summary>
public sealed class SessionsCommandTests
{
    private const string Reason = "Replaying request 1 (LSN 400) did not reproduce its logged reply (status 200, another hash)";

    private static readonly byte[] KeyOwner = [.. Enumerable.Range(1, 32).Select(i => (byte)i)];

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static (int Exit, string Output) Psctl(params string[] args)
    {
        var output = new StringWriter();
        var exit = Cli.Run(["sessions", .. args], output, output);
        return (exit, output.ToString());
    }

    private static LogOptions Options(string directory, string? key = null)
    {
        var options = new LogOptions
        {
            Directory = directory,
            PageSizeBits = 14,
            MemorySizeBits = 16,
            SegmentSizeBits = 16,
            MaxRecordBytes = 4096,
        };
        options.Encryption.Key = key;
        return options;
    }

    /// <summary>The sessions of the log <see cref="WriteLogAsync"/> writes.</summary>
    private sealed record Written(SessionId Quarantined, SessionId Other, SessionId Key, SessionId Live)
    {
        public static string Tag(SessionId id) => Diagnostics.PersistentServicesTracing.SessionTag(id);
    }

    /// <summary>
    /// Four sessions, each with request 1 and its reply: two anonymous sessions and a key session quarantined (their markers
    /// logged, as a divergent replay leaves them), and a live session owned by a principal.
    /// </summary>
    private static async Task<Written> WriteLogAsync(string directory, string? key = null)
    {
        var written = new Written(SessionId.NewRandom(), SessionId.NewRandom(), SessionId.NewRandom(), SessionId.NewRandom());
        await using var log = await DurableLog.OpenAsync(Options(directory, key), cancellationToken: Ct);
        foreach (var (id, owner, version, quarantined) in new[]
                 {
                     (written.Quarantined, Array.Empty<byte>(), 3, true),
                     (written.Other, [], 3, true),
                     (written.Key, KeyOwner, KeySessions.OwnerVersion, true),
                     (written.Live, KeyOwner, 3, false),
                 })
        {
            var bytes = ByteString.CopyFrom(id.ToBytes());
            log.Append(RecordKind.SessionStarted, new SessionStarted { SessionId = bytes, Owner = ByteString.CopyFrom(owner), OwnerVersion = (uint)version, StartedAtUnixMs = 1_000 });
            var hash = ByteString.CopyFrom(new byte[32]);
            var request = log.Append(RecordKind.Request, new LoggedRequest
            {
                SessionId = bytes,
                Sequence = 1,
                Method = "POST",
                Path = "/cart/add",
                QueryString = "?access_token=secret",
                Body = ByteString.CopyFromUtf8("{\"item\":\"a\"}"),
                Endpoint = "HTTP: POST /cart/add",
                RequestHash = hash,
                RequestHashVersion = 2,
                ReceivedAtUnixMs = 2_000,
            });
            log.Append(RecordKind.SharedWrite, new SharedWrite { Variable = "stock", Value = ByteString.CopyFromUtf8("1"), SessionId = bytes, Sequence = 1 });
            log.Append(RecordKind.Reply, new ReplySent { SessionId = bytes, Sequence = 1, StatusCode = 200, ReplyHash = hash, RequestLsn = request });
            if (quarantined)
            {
                log.Append(RecordKind.SessionCheckpoint, new SessionCheckpoint
                {
                    SessionId = bytes,
                    Owner = ByteString.CopyFrom(owner),
                    OwnerVersion = (uint)version,
                    StartedAtUnixMs = 1_000,
                    LastActivityUnixMs = 2_000,
                    LastSequence = 1,
                    LastRequestHash = hash,
                    LastRequestHashVersion = 2,
                    Quarantined = Reason,
                });
            }
        }

        await log.WaitUntilDurableAsync(log.TailAddress - 1, Ct);
        return written;
    }

    /// <summary>What the next start's analysis scan rebuilds from the log (as the service's recovery runs it).</summary>
    private static async Task<SessionTable> RecoverAsync(string directory)
    {
        await using var log = await DurableLog.OpenAsync(Options(directory), cancellationToken: Ct);
        var sessions = new SessionTable();
        await AnalysisScan.RunAsync(log, directory, sessions, new SharedStateStore(log, "test", 100), Ct, readAtRest: true);
        return sessions;
    }

    [Fact]
    public async Task List_ShowsEverySessionByTag_QuarantinedWithTheirReason_NeverAnId()
    {
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);

        var (exit, output) = Psctl("list", dir.Path);

        Assert.True(exit == Cli.Clean, output);
        Assert.Contains("Sessions: 4 live (quarantined 3, Idempotency-Keys 1, expired keys 0); listed: 4", output, StringComparison.Ordinal);
        Assert.Matches($@"{Written.Tag(written.Quarantined)}\s+session\s+quarantined\s+1\s+anonymous", output);
        Assert.Matches($@"{Written.Tag(written.Key)}\s+key\s+quarantined\s+1\s+{Convert.ToHexStringLower(KeyOwner.AsSpan(0, 6))}", output);
        Assert.Matches($@"{Written.Tag(written.Live)}\s+session\s+live\s+1\s+\S+\s+\d+\s+1\s", output); // one request to replay
        Assert.Contains("quarantined because: " + Reason, output, StringComparison.Ordinal);
        foreach (var id in new[] { written.Quarantined, written.Other, written.Key, written.Live })
        {
            Assert.DoesNotContain(id.ToString(), output, StringComparison.Ordinal);
        }

        var (_, filtered) = Psctl("list", dir.Path, "--state", "quarantined", "--kind", "key");
        Assert.Contains("listed: 1", filtered, StringComparison.Ordinal);
        Assert.Contains(Written.Tag(written.Key), filtered, StringComparison.Ordinal);
        Assert.DoesNotContain(Written.Tag(written.Quarantined), filtered, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Show_ListsTheRecordsThatLedToTheQuarantine_BodiesAndQueriesOnlyWhenAsked()
    {
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);
        var tag = Written.Tag(written.Quarantined);

        var (exit, output) = Psctl("show", dir.Path, tag);

        Assert.True(exit == Cli.Clean, output);
        Assert.Contains($"Session {tag}: a session, anonymous", output, StringComparison.Ordinal);
        Assert.Contains("State: quarantined: " + Reason, output, StringComparison.Ordinal);
        Assert.Contains("request 1: POST /cart/add, body 12 bytes, 1 records written while it ran; HTTP: POST /cart/add", output, StringComparison.Ordinal);
        Assert.Contains("reply 1: 200; short record", output, StringComparison.Ordinal);
        Assert.Contains("checkpoint after request 1; quarantine marker: " + Reason, output, StringComparison.Ordinal);
        Assert.DoesNotContain("item", output, StringComparison.Ordinal);
        Assert.DoesNotContain("access_token", output, StringComparison.Ordinal);
        Assert.DoesNotContain(written.Quarantined.ToString(), output, StringComparison.Ordinal);

        var (_, bodies) = Psctl("show", dir.Path, written.Quarantined.ToString(), "--bodies");
        Assert.Contains($"(id {written.Quarantined})", bodies, StringComparison.Ordinal); // named by id: its caller knows it
        Assert.Contains("POST /cart/add?access_token=secret", bodies, StringComparison.Ordinal);
        Assert.Contains("body: {\"item\":\"a\"}", bodies, StringComparison.Ordinal);
    }

    [Fact]
    public async Task DiscardAndRelease_AppendWhatTheAdminEndpointsAppend_TheNextRecoverySeesIt()
    {
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);

        var (discard, discarded) = Psctl("discard", dir.Path, Written.Tag(written.Quarantined));
        Assert.True(discard == Cli.Clean, discarded);
        Assert.Contains("Discarded: a SessionEnded record (reason OperatorDiscarded)", discarded, StringComparison.Ordinal);
        Assert.Contains($"By {Environment.UserName} on ", discarded, StringComparison.Ordinal);

        var (release, released) = Psctl("release", dir.Path, Written.Tag(written.Other));
        Assert.True(release == Cli.Clean, released);
        Assert.Contains("a retry of request 1 gets 410 session-released", released, StringComparison.Ordinal);

        var (key, keyed) = Psctl("discard", dir.Path, Written.Tag(written.Key));
        Assert.True(key == Cli.Clean, keyed);
        Assert.Contains("kept as an expired key", keyed, StringComparison.Ordinal);

        // What the next start's recovery rebuilds: the discarded session is gone, the released one is live from a checkpoint
        // with no state whose reply is the released stand-in, the key is an expired key (never ended: it would run again).
        var sessions = await RecoverAsync(dir.Path);
        Assert.False(sessions.TryGet(written.Quarantined, out _));
        Assert.True(sessions.TryGet(written.Other, out var other));
        Assert.Null(other.QuarantineReason);
        Assert.Equal(1, other.LastSequence);
        Assert.Equal(QuarantineRepair.ReleasedReply().Body, other.LastReply!.Reply!.Body);
        Assert.True(sessions.TryGet(written.Key, out var expired));
        Assert.Null(expired.QuarantineReason);
        Assert.True(KeySessions.IsExpiredMarker(expired.LastReply!.Reply));
        Assert.True(sessions.TryGet(written.Live, out _));

        // The records themselves: the end names the operator's reason.
        await using (var log = await DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct))
        {
            var ends = new List<SessionEnded>();
            await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
            {
                if (record.Kind == RecordKind.SessionEnded)
                {
                    ends.Add(record.Parse(SessionEnded.Parser));
                }
            }

            var end = Assert.Single(ends);
            Assert.Equal(SessionEndReason.OperatorDiscarded, end.Reason);
            Assert.Equal(written.Quarantined.ToBytes(), end.SessionId.ToByteArray());
        }

        var (_, list) = Psctl("list", dir.Path);
        Assert.Contains("Sessions: 3 live (quarantined 0, Idempotency-Keys 1, expired keys 1)", list, StringComparison.Ordinal);
    }

    [Fact]
    public async Task OnAnEncryptedLog_WithoutItsKeyIsRefused_WithTheKeyListsAndDiscards_SealingWhatItAppends()
    {
        using var dir = new TempDirectory();
        var key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var written = await WriteLogAsync(dir.Path, key);
        var committed = await CommittedUntilAsync(dir.Path, key);

        var (refused, why) = Psctl("list", dir.Path);
        Assert.True(refused == Cli.CannotCheck, why);
        Assert.Contains("the log is encrypted and cannot be opened without its key", why, StringComparison.Ordinal);
        Assert.Contains("no key was given", why, StringComparison.Ordinal);
        Assert.Equal(committed, await CommittedUntilAsync(dir.Path, key));

        var keyFile = Path.Combine(dir.Path, "..", $"key-{Guid.NewGuid():N}");
        await File.WriteAllTextAsync(keyFile, key + "\n", Ct);
        try
        {
            var (list, listed) = Psctl("list", dir.Path, "--key-file", keyFile);
            Assert.True(list == Cli.Clean, listed);
            Assert.Contains(Written.Tag(written.Quarantined), listed, StringComparison.Ordinal);

            var (discard, discarded) = Psctl("discard", dir.Path, Written.Tag(written.Quarantined), "--key-file", keyFile);
            Assert.True(discard == Cli.Clean, discarded);

            // What psctl appended is sealed too: verify finds no record in clear.
            var output = new StringWriter();
            Assert.Equal(Cli.Clean, Cli.Run(["verify", dir.Path, "--key-file", keyFile], output, output));
            Assert.Contains("in clear 0", output.ToString(), StringComparison.Ordinal);
            await using var log = await DurableLog.OpenAsync(Options(dir.Path, key), cancellationToken: Ct);
            var ended = false;
            await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
            {
                ended |= record.Kind == RecordKind.SessionEnded;
            }

            Assert.True(ended);
        }
        finally
        {
            File.Delete(keyFile);
        }
    }

    [Fact]
    public async Task Discard_WithAFirstKeyThatOpensNoRecord_IsRefused_TheLogUnchanged_AndTheServiceStillOpensIt()
    {
        // Issue 55: "--key-file k9 --key-file k1", k9 opening no record, sealed psctl's record with k9 and exited 0; the
        // service, configured with k1, then refused to start ("key id ... not among the configured log keys").
        using var dir = new TempDirectory();
        var k1 = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var k9 = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var written = await WriteLogAsync(dir.Path, k1);
        var committed = await CommittedUntilAsync(dir.Path, k1);
        var k1File = Path.Combine(dir.Path, "..", $"k1-{Guid.NewGuid():N}");
        var k9File = Path.Combine(dir.Path, "..", $"k9-{Guid.NewGuid():N}");
        await File.WriteAllTextAsync(k1File, k1 + "\n", Ct);
        await File.WriteAllTextAsync(k9File, k9 + "\n", Ct);
        try
        {
            var (wrong, why) = Psctl("discard", dir.Path, Written.Tag(written.Quarantined), "--key-file", k9File, "--key-file", k1File);
            Assert.True(wrong == Cli.Refused, why);
            Assert.Contains("The key given in position 2 has id", why, StringComparison.Ordinal);
            Assert.Contains("Nothing was changed.", why, StringComparison.Ordinal);
            Assert.DoesNotContain(k1, why, StringComparison.Ordinal);
            Assert.DoesNotContain(k9, why, StringComparison.Ordinal);
            Assert.Equal(committed, await CommittedUntilAsync(dir.Path, k1));

            var (alone, aloneWhy) = Psctl("release", dir.Path, Written.Tag(written.Quarantined), "--key-file", k9File);
            Assert.True(alone == Cli.CannotCheck || alone == Cli.Refused, aloneWhy);
            Assert.Equal(committed, await CommittedUntilAsync(dir.Path, k1));

            var (right, done) = Psctl("discard", dir.Path, Written.Tag(written.Quarantined), "--key-file", k1File, "--key-file", k9File);
            Assert.True(right == Cli.Clean, done);

            // The service, configured with k1 only, reads every record, psctl's included.
            await using var log = await DurableLog.OpenAsync(Options(dir.Path, k1), cancellationToken: Ct);
            var ended = false;
            await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
            {
                ended |= record.Kind == RecordKind.SessionEnded;
            }

            Assert.True(ended);
        }
        finally
        {
            File.Delete(k1File);
            File.Delete(k9File);
        }
    }

    [Fact]
    public async Task Repair_WithAKeyOnALogInClear_IsRefused_AndAppendsNothing()
    {
        // A record sealed with a key the service may not have would stop a service that writes in clear.
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);
        var end = await CommittedUntilAsync(dir.Path);
        var key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var writer = new StringWriter();
        var exit = Cli.Run(["sessions", "discard", dir.Path, Written.Tag(written.Quarantined)], writer, writer,
            name => name == LogKeyArguments.EnvironmentVariable ? key : null);
        var output = writer.ToString();
        Assert.True(exit == Cli.Refused, output);
        Assert.Contains("the log holds no sealed record", output, StringComparison.Ordinal);
        Assert.Equal(end, await CommittedUntilAsync(dir.Path));
    }

    [Theory]
    [InlineData("list")]
    [InlineData("discard")]
    public async Task KeyFile_GivenTheKeyItselfInsteadOfAPath_NeverPrintsIt(string command)
    {
        using var dir = new TempDirectory();
        var key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var written = await WriteLogAsync(dir.Path, key);
        string[] args = command == "list" ? ["list", dir.Path, "--key-file", key] : ["discard", dir.Path, Written.Tag(written.Quarantined), "--key-file", key];
        var (exit, output) = Psctl(args);
        Assert.True(exit == Cli.CannotCheck, output);
        Assert.Contains("looks like a key itself", output, StringComparison.Ordinal);
        Assert.DoesNotContain(key, output, StringComparison.Ordinal);
        Assert.DoesNotContain(key[..20], output, StringComparison.Ordinal);

        var verify = new StringWriter();
        Assert.Equal(Cli.CannotCheck, Cli.Run(["verify", dir.Path, "--key-file", key], verify, verify));
        Assert.DoesNotContain(key[..20], verify.ToString(), StringComparison.Ordinal);

        // A key anywhere else an argument goes: an extra argument, the log directory, the session.
        string[][] misplaced =
        [
            ["verify", dir.Path, key],
            ["verify", key],
            ["sessions", "list", key],
            ["sessions", "show", dir.Path, key],
            ["sessions", "discard", dir.Path, Written.Tag(written.Quarantined), key],
            ["replay-check", "--log", dir.Path, key],
        ];
        foreach (var arguments in misplaced)
        {
            var writer = new StringWriter();
            Assert.NotEqual(Cli.Clean, Cli.Run(arguments, writer, writer, _ => null));
            Assert.DoesNotContain(key[..20], writer.ToString(), StringComparison.Ordinal);
        }
    }

    [Fact]
    public async Task AnIdThatBeginsWithADash_IsTheSessionNotAnOption_AndDoubleDashEndsTheOptions()
    {
        // Session ids are base64url: about one in 64 begins with '-'. Found when CI drew one for the show test above.
        using var dir = new TempDirectory();
        await WriteLogAsync(dir.Path);
        var dashed = SessionId.NewRandom();
        while (!dashed.ToString().StartsWith('-'))
        {
            dashed = SessionId.NewRandom();
        }

        var (exit, output) = Psctl("show", dir.Path, dashed.ToString());
        Assert.True(exit == Cli.Refused, output);
        Assert.Contains($"no live session {dashed}", output, StringComparison.Ordinal);

        var (ended, endedOutput) = Psctl("show", dir.Path, "--", dashed.ToString());
        Assert.True(ended == Cli.Refused, endedOutput);
    }

    [Fact]
    public async Task Repair_OfASessionNotQuarantined_OrUnknown_IsRefused_AndAppendsNothing()
    {
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);
        var end = await CommittedUntilAsync(dir.Path);

        var (live, refused) = Psctl("release", dir.Path, Written.Tag(written.Live));
        Assert.Equal(Cli.Refused, live);
        Assert.Contains("is live, not quarantined", refused, StringComparison.Ordinal);

        var (unknown, missing) = Psctl("discard", dir.Path, "0123456789ab");
        Assert.Equal(Cli.Refused, unknown);
        Assert.Contains("no live session 0123456789ab", missing, StringComparison.Ordinal);

        var (malformed, bad) = Psctl("show", dir.Path, "not-a-tag");
        Assert.Equal(Cli.Refused, malformed);
        Assert.Contains("neither a trace tag", bad, StringComparison.Ordinal);

        Assert.Equal(end, await CommittedUntilAsync(dir.Path));
    }

    [Fact]
    public async Task Sessions_OnALogInUse_IsRefused_ChangingNothing()
    {
        using var dir = new TempDirectory();
        var written = await WriteLogAsync(dir.Path);
        long end;
        await using (var running = await DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct))
        {
            end = running.DurableUntil;
            foreach (var args in new string[][] { ["list", dir.Path], ["discard", dir.Path, Written.Tag(written.Quarantined)] })
            {
                var (exit, output) = Psctl(args);
                Assert.Equal(Cli.CannotCheck, exit);
                Assert.Contains("is in use", output, StringComparison.Ordinal);
                Assert.Contains("directory.lock", output, StringComparison.Ordinal);
            }
        }

        Assert.Equal(end, await CommittedUntilAsync(dir.Path));
        Assert.Contains(Written.Tag(written.Quarantined), Psctl("list", dir.Path, "--state", "quarantined").Output, StringComparison.Ordinal);
    }

    [Fact]
    public void Sessions_OnAMissingOrEmptyDirectory_IsRefused_AndCreatesNoLog()
    {
        using var dir = new TempDirectory();
        var (empty, output) = Psctl("discard", dir.Path, "0123456789ab");
        Assert.Equal(Cli.CannotCheck, empty);
        Assert.Contains("is not a PersistentServices log directory", output, StringComparison.Ordinal);
        Assert.Empty(Directory.GetFileSystemEntries(dir.Path));

        var missing = dir.Combine("nowhere");
        var (none, text) = Psctl("list", missing);
        Assert.Equal(Cli.CannotCheck, none);
        Assert.Contains("does not exist", text, StringComparison.Ordinal);
        Assert.False(Directory.Exists(missing));
    }

    [Theory]
    [InlineData("list")]
    [InlineData("show", "/tmp")]
    [InlineData("discard", "/tmp", "0123456789ab", "extra")]
    [InlineData("list", "/tmp", "--bodies")]
    [InlineData("list", "/tmp", "--state", "sleeping")]
    [InlineData("show", "/tmp", "0123456789ab", "--limit", "0")]
    [InlineData("purge", "/tmp")]
    public void Sessions_BadArguments_ExitTwoWithUsage(params string[] args)
    {
        var (exit, output) = Psctl(args);
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("psctl sessions list <log-directory>", output, StringComparison.Ordinal);
    }

    private static async Task<long> CommittedUntilAsync(string directory, string? key = null)
    {
        await using var log = await DurableLog.OpenAsync(Options(directory, key), NullLogger.Instance, Ct);
        return log.DurableUntil;
    }
}
