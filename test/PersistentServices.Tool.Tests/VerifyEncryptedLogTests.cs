using System.Buffers.Binary;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// <c>psctl verify</c> on a log whose records are sealed (LogOptions.Encryption, issue 32): it reads it with the keys given
/// by <c>--key-file</c> or <c>PSCTL_LOG_KEYS</c>, says clearly which key is missing otherwise, and never prints a key.
/// </summary>
public sealed class VerifyEncryptedLogTests
{
    private static readonly string Key = Convert.ToBase64String([.. Enumerable.Range(7, 32).Select(i => (byte)i)]);
    private static readonly string OtherKey = Convert.ToBase64String([.. Enumerable.Range(77, 32).Select(i => (byte)i)]);

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static string KeyId(string key) => LogKey.Format(LogKey.IdOf(Convert.FromBase64String(key)));

    private static (int Exit, string Output) Verify(Func<string, string?>? environment, params string[] args)
    {
        var output = new StringWriter();
        var exit = Cli.Run(["verify", .. args], output, output, environment ?? (_ => null));
        return (exit, output.ToString());
    }

    private static async Task<List<long>> WriteSealedLogAsync(string directory, string key)
    {
        var options = new LogOptions
        {
            Directory = directory,
            PageSizeBits = 14,
            MemorySizeBits = 16,
            SegmentSizeBits = 16,
            MaxRecordBytes = 4096,
            MetadataFlushInterval = TimeSpan.Zero,
        };
        options.Encryption.Key = key;
        var lsns = new List<long>();
        await using var log = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        lsns.Add(log.Append(RecordKind.SessionStarted, new SessionStarted { SessionId = ByteString.CopyFrom(new byte[16]) }));
        for (var i = 0; i < 5; i++)
        {
            lsns.Add(log.Append(RecordKind.Request, new LoggedRequest { SessionId = ByteString.CopyFrom(new byte[16]), Sequence = i + 1, Body = ByteString.CopyFromUtf8("password=hunter2-secret") }));
            await log.WaitUntilDurableAsync(lsns[^1], Ct);
        }

        File.Delete(Path.Combine(directory, "directory.lock"));
        return lsns;
    }

    private static string KeyFile(TempDirectory dir, string name, string content)
    {
        var path = dir.Combine(name);
        File.WriteAllText(path, content + "\n");
        return path;
    }

    [Fact]
    public async Task Verify_EncryptedLog_WithoutKey_SaysWhichKeyIsMissingAndHowToGiveIt_ExitsTwo()
    {
        using var dir = new TempDirectory();
        var lsns = await WriteSealedLogAsync(dir.Path, Key);

        var (exit, output) = Verify(null, dir.Path);

        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains($"the log is encrypted and cannot be checked without its key: the record at LSN {lsns[0]} is sealed with key id {KeyId(Key)}, and no key was given", output, StringComparison.Ordinal);
        Assert.Contains("--key-file", output, StringComparison.Ordinal);
        Assert.Contains("PSCTL_LOG_KEYS", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_EncryptedLog_WithKeyFile_ReadsIt_CountsSealedRecordsByKey_PrintsNoBodyNorKey()
    {
        using var dir = new TempDirectory();
        using var keys = new TempDirectory();
        await WriteSealedLogAsync(dir.Path, Key);

        var (exit, output) = Verify(null, dir.Path, "--key-file", KeyFile(keys, "log-key", Key));

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains("Sessions: 1 live (1 started, 0 ended); requests: 5", output, StringComparison.Ordinal);
        Assert.Contains($"Encryption: records sealed with key {KeyId(Key)} 6; in clear 0", output, StringComparison.Ordinal);
        Assert.DoesNotContain("hunter2", output, StringComparison.Ordinal);
        Assert.DoesNotContain(Key, output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_EncryptedLog_WithKeysInTheEnvironment_ReadsIt()
    {
        using var dir = new TempDirectory();
        await WriteSealedLogAsync(dir.Path, Key);

        var (exit, output) = Verify(name => name == LogKeyArguments.EnvironmentVariable ? $"{OtherKey}, {Key}" : null, dir.Path);

        Assert.Equal(Cli.Clean, exit);
        Assert.Contains("Result: no problem found", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_EncryptedLog_WithWrongKey_NamesBothKeyIds_ExitsTwo()
    {
        using var dir = new TempDirectory();
        using var keys = new TempDirectory();
        await WriteSealedLogAsync(dir.Path, Key);

        var (exit, output) = Verify(null, dir.Path, "--key-file", KeyFile(keys, "wrong", OtherKey));

        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains($"sealed with key id {KeyId(Key)}, and the keys given have the ids {KeyId(OtherKey)}", output, StringComparison.Ordinal);
        Assert.DoesNotContain(OtherKey, output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_KeyFileThatHoldsNoKey_NamesTheFile_NotItsContent_ExitsTwo()
    {
        using var dir = new TempDirectory();
        using var keys = new TempDirectory();
        await WriteSealedLogAsync(dir.Path, Key);
        var file = KeyFile(keys, "short", "c2hvcnQta2V5LXZhbHVl");

        var (exit, output) = Verify(null, dir.Path, "--key-file", file);

        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains($"the key file '{file}' must be a 256-bit AES key", output, StringComparison.Ordinal);
        Assert.DoesNotContain("c2hvcnQta2V5LXZhbHVl", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Verify_SealedRecordChangedWithChecksumsRecomputed_IsAProblemNamingItsLsn_ExitsOne()
    {
        using var dir = new TempDirectory();
        using var keys = new TempDirectory();
        var lsns = await WriteSealedLogAsync(dir.Path, Key);
        Tamper(dir.Combine("log.0"), lsns[2]);

        var (exit, output) = Verify(null, dir.Path, "--key-file", KeyFile(keys, "log-key", Key));

        Assert.Equal(Cli.Refused, exit);
        Assert.Contains($"Corrupt committed log entry at address {lsns[2]}", output, StringComparison.Ordinal);
        Assert.Contains("fails authentication", output, StringComparison.Ordinal);
    }

    /// <summary>Flips a byte of the sealed body at <paramref name="lsn"/> and recomputes the envelope's CRC-32C and FASTER's XOR.</summary>
    private static void Tamper(string path, long lsn)
    {
        var bytes = File.ReadAllBytes(path);
        var at = (int)lsn;
        var length = FasterEntryLayout.ReadLength(bytes.AsSpan(at));
        var envelope = bytes.AsSpan(at + FasterEntryLayout.HeaderSize, length);
        envelope[RecordEnvelope.CiphertextOffset] ^= 1;
        BinaryPrimitives.WriteUInt32LittleEndian(envelope, Crc32C.Compute(envelope[4..]));
        ulong xor = 0;
        var span = bytes.AsSpan(at + 8, length + 4);
        for (; span.Length >= 8; span = span[8..])
        {
            xor ^= BinaryPrimitives.ReadUInt64LittleEndian(span);
        }

        foreach (var b in span)
        {
            xor ^= b;
        }

        BinaryPrimitives.WriteUInt64LittleEndian(bytes.AsSpan(at), xor);
        File.WriteAllBytes(path, bytes);
    }
}
