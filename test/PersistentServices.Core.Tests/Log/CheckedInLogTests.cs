using PersistentServices.Log;
using PersistentServices.Log.CrashChild;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// The log written by the first build (Fixtures/log-v1) must stay readable by every later build; so must the log with
/// sealed records (Fixtures/log-v2-sealed: records in clear, then sealed with key A, then with key B after a rotation).
/// </summary>
public sealed class CheckedInLogTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static string FixtureDirectory => Path.Combine(AppContext.BaseDirectory, "Fixtures", FixtureLog.Name);

    private static void CopyFixture(string to, string name = FixtureLog.Name)
    {
        foreach (var file in Directory.GetFiles(Path.Combine(AppContext.BaseDirectory, "Fixtures", name)))
        {
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        }
    }

    [Fact]
    public async Task CheckedInLogV1_Opens_EveryRecordReadsBack()
    {
        using var dir = new TempDirectory();
        CopyFixture(dir.Path);

        await using var log = await DurableLog.OpenAsync(FixtureLog.Options(dir.Path), cancellationToken: Ct);
        var records = new List<LogRecord>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            records.Add(record);
        }

        Assert.Null(log.OpenReport.TornTail);
        Assert.False(log.OpenReport.RecoveredWithoutMetadata);
        var expected = FixtureLog.Expected(log.BeginAddress);
        Assert.Equal(expected.Select(e => e.Kind), records.Select(r => r.Kind));
        for (var i = 0; i < expected.Count; i++)
        {
            var body = expected[i].Kind == RecordKind.Payload ? (Google.Protobuf.IMessage)records[i].Parse(Payload.Parser) : records[i].Parse(LogTruncated.Parser);
            Assert.Equal(expected[i].Body, body);
        }
    }

    [Fact]
    public async Task CurrentBuild_WritesTheSameBytesAsTheCheckedInLog()
    {
        using var dir = new TempDirectory();

        await FixtureLog.WriteAsync(dir.Path);

        // If this fails, the on-disk format changed: keep log-v1 (old logs must stay readable), add a log-v2 fixture
        // and a test for it, and describe the change in docs/log-format.md.
        // The log keeps zeroed space after its data (DirectFileDevice), so the file may be longer: zeros after the data.
        var expected = File.ReadAllBytes(Path.Combine(FixtureDirectory, "log.0"));
        var written = File.ReadAllBytes(dir.Combine("log.0"));
        Assert.True(written.Length >= expected.Length, $"The log wrote {written.Length} bytes, the fixture has {expected.Length}.");
        Assert.Equal(expected, written[..expected.Length]);
        Assert.Equal(-1, written.AsSpan(expected.Length).IndexOfAnyExcept((byte)0));
    }

    [Fact]
    public async Task CheckedInLogV2Sealed_OpensWithItsKeys_EveryRecordReadsBack_InClearSealedWithAThenWithB()
    {
        using var dir = new TempDirectory();
        CopyFixture(dir.Path, FixtureLog.SealedName);

        await using var log = await DurableLog.OpenAsync(FixtureLog.SealedOptions(dir.Path), cancellationToken: Ct);
        var records = new List<LogRecord>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            records.Add(record);
        }

        Assert.Null(log.OpenReport.TornTail);
        var expected = FixtureLog.Expected(log.BeginAddress);
        Assert.Equal(expected.Select(e => e.Kind), records.Select(r => r.Kind));
        for (var i = 0; i < expected.Count; i++)
        {
            var body = expected[i].Kind == RecordKind.Payload ? (Google.Protobuf.IMessage)records[i].Parse(Payload.Parser) : records[i].Parse(LogTruncated.Parser);
            Assert.Equal(expected[i].Body, body);
        }

        var keyA = LogKey.IdOf(Convert.FromBase64String(FixtureLog.SealedKeyA));
        var keyB = LogKey.IdOf(Convert.FromBase64String(FixtureLog.SealedKeyB));
        var tags = records.Where(r => r.Kind == RecordKind.Payload).Select(r => (r.Parse(Payload.Parser).Tag - 1000, r.Header.KeyId)).ToList();
        Assert.All(tags, t => Assert.Equal(t.Item1 switch { < 6 => null, < 9 => keyA, _ => (uint?)keyB }, t.KeyId));
    }

    [Fact]
    public async Task CheckedInLogV2Sealed_WithoutTheRotatedOutKey_IsRefused_NamingIt()
    {
        using var dir = new TempDirectory();
        CopyFixture(dir.Path, FixtureLog.SealedName);

        var error = await Assert.ThrowsAsync<LogEncryptionKeyException>(() => DurableLog.OpenAsync(FixtureLog.SealedOptions(dir.Path, withKeyA: false), cancellationToken: Ct));

        Assert.Equal(LogKey.Format(LogKey.IdOf(Convert.FromBase64String(FixtureLog.SealedKeyA))), error.KeyId);
    }
}
