using System.Security.Cryptography;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary><c>psctl verify</c>: what it reports, its exit status, and that it writes nothing.</summary>
public sealed class VerifyCommandTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static LogOptions Options(string directory) => new()
    {
        Directory = directory,
        PageSizeBits = 14,
        MemorySizeBits = 16,
        SegmentSizeBits = 16,
        MaxRecordBytes = 4096,
        MetadataFlushInterval = TimeSpan.Zero,
    };

    private static (int Exit, string Output) Verify(params string[] args)
    {
        var output = new StringWriter();
        var exit = Cli.Run(["verify", .. args], output, output);
        return (exit, output.ToString());
    }

    /// <summary>Two sessions (one ended), three requests, two shared variables, and payloads, in several commits.</summary>
    private static async Task<long> WriteServiceLikeLogAsync(string directory)
    {
        await using var log = await DurableLog.OpenAsync(Options(directory), cancellationToken: Ct);
        var sessions = new[] { new byte[16], new byte[16], new byte[16] };
        for (var i = 0; i < sessions.Length; i++)
        {
            sessions[i][0] = (byte)(i + 1);
            log.Append(RecordKind.SessionStarted, new SessionStarted { SessionId = ByteString.CopyFrom(sessions[i]) });
        }

        for (var i = 0; i < 3; i++)
        {
            log.Append(RecordKind.Request, new LoggedRequest { SessionId = ByteString.CopyFrom(sessions[0]), Sequence = i + 1 });
            log.Append(RecordKind.SharedWrite, new SharedWrite { Variable = i % 2 == 0 ? "stock" : "tickets", Value = ByteString.CopyFromUtf8("1") });
            await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, new Payload { Tag = (uint)i }), Ct);
        }

        await log.WaitUntilDurableAsync(log.Append(RecordKind.SessionEnded, new SessionEnded { SessionId = ByteString.CopyFrom(sessions[2]) }), Ct);
        return log.DurableUntil;
    }

    private static Dictionary<string, (long Length, DateTime Written, string Hash)> Describe(string directory) =>
        Directory.GetFiles(directory).ToDictionary(
            f => Path.GetFileName(f),
            f => (new FileInfo(f).Length, File.GetLastWriteTimeUtc(f), Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f)))));

    [Fact]
    public async Task Verify_CleanLog_ReportsCommittedRangeRecordsSessionsAndSharedValues_ExitsZero()
    {
        using var dir = new TempDirectory();
        var committed = await WriteServiceLikeLogAsync(dir.Path);

        var (exit, output) = Verify(dir.Path);

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains($"Committed: [64, {committed:N0})", output, StringComparison.Ordinal);
        Assert.Contains("13 records", output, StringComparison.Ordinal);
        Assert.Contains("Sessions: 2 live (3 started, 1 ended); requests: 3", output, StringComparison.Ordinal);
        Assert.Contains("Shared values: 2 variables", output, StringComparison.Ordinal);
        Assert.Contains("(recorded in commit.meta)", output, StringComparison.Ordinal);
        Assert.Contains("Result: no problem found", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_TornTail_ReportsItWithoutTruncating_AndWritesNothing()
    {
        using var dir = new TempDirectory();
        var committed = await WriteServiceLikeLogAsync(dir.Path);
        File.Delete(dir.Combine("directory.lock"));
        var garbage = new byte[1000];
        new Random(7).NextBytes(garbage);
        using (var stream = new FileStream(dir.Combine("log.0"), FileMode.Open, FileAccess.Write))
        {
            // Right after the committed data (a write cut short; the file may go on with zeroed space).
            stream.Position = committed;
            stream.Write(garbage);
        }

        var before = Describe(dir.Path);
        var (exit, output) = Verify(dir.Path);

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains($"Tail: [{committed:N0},", output, StringComparison.Ordinal);
        Assert.Equal(before, Describe(dir.Path));
        Assert.False(File.Exists(dir.Combine("directory.lock")), "verify must not create the lock file");
    }

    [Theory]
    [InlineData("young log, its segment deleted", "no segment file")]
    [InlineData("cut to a length that is not whole sectors", "not a whole number of 512-byte sectors")]
    [InlineData("cut at a 4 KiB boundary below the metadata", "may have been acknowledged")]
    [InlineData("a bit flipped in committed data", "Corrupt committed log entry")]
    public async Task Verify_DamageTheServiceRefuses_ListsIt_ExitsOne_AndAgreesWithOpen(string damage, string expected)
    {
        using var dir = new TempDirectory();
        long dataEnd;
        await using (var log = await DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct))
        {
            for (uint i = 0; i < 60; i++)
            {
                await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, new Payload { Tag = i, Data = ByteString.CopyFrom(new byte[200]) }), Ct);
            }

            dataEnd = log.DurableUntil; // in segment 0: the file may go on with zeroed space after it
        }

        var segment = dir.Combine("log.0");
        var length = new FileInfo(segment).Length;
        switch (damage)
        {
            case "young log, its segment deleted":
                File.Delete(segment);
                break;
            case "cut to a length that is not whole sectors":
                using (var stream = new FileStream(segment, FileMode.Open, FileAccess.Write))
                {
                    stream.SetLength(length - 100);
                }

                break;
            case "cut at a 4 KiB boundary below the metadata":
                using (var stream = new FileStream(segment, FileMode.Open, FileAccess.Write))
                {
                    stream.SetLength((dataEnd - 1) & ~4095L);
                }

                break;
            default:
                using (var stream = new FileStream(segment, FileMode.Open, FileAccess.ReadWrite))
                {
                    stream.Position = 200;
                    var b = stream.ReadByte();
                    stream.Position = 200;
                    stream.WriteByte((byte)(b ^ 0x10));
                }

                break;
        }

        var before = Describe(dir.Path);
        var (exit, output) = Verify(dir.Path);

        Assert.Equal(Cli.Refused, exit);
        Assert.Contains("Result: REFUSED", output, StringComparison.Ordinal);
        Assert.Contains(expected, output, StringComparison.Ordinal);
        Assert.Equal(before, Describe(dir.Path));
        await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct));
    }

    [Fact]
    public async Task Verify_LogOpenByAService_SaysItIsInUse_StillReads()
    {
        using var dir = new TempDirectory();
        await WriteServiceLikeLogAsync(dir.Path);
        await using var log = await DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct);

        var (exit, output) = Verify(dir.Path);

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains("In use:", output, StringComparison.Ordinal);
    }

    [Fact]
    public void Verify_EmptyDirectory_IsANewLog_ExitsZero()
    {
        using var dir = new TempDirectory();

        var (exit, output) = Verify(dir.Path);

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains("Log: empty", output, StringComparison.Ordinal);
        Assert.Empty(Directory.GetFiles(dir.Path));
    }

    [Fact]
    public void Verify_MissingDirectoryOrArguments_ExitsTwo()
    {
        Assert.Equal(Cli.CannotCheck, Verify("/nonexistent/ps-log").Exit);
        Assert.Equal(Cli.CannotCheck, Verify().Exit);
        Assert.Equal(Cli.CannotCheck, Cli.Run(["check"], TextWriter.Null, TextWriter.Null));
    }
}
