using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// Issue 32, "Secrets at rest": with a key (LogOptions.Encryption), every record is sealed with AES-256-GCM, so the log's
/// files hold no body in clear; a log is refused without its key or with a wrong one, a sealed record changed from outside
/// is corruption naming its LSN (also after the last commit), rotated keys read older records, and a log written in clear
/// goes on with sealed records once a key is set (docs/log-format.md "Envelope", docs/operations.md "Encrypting the log").
/// </summary>
public sealed class LogEncryptionTests
{
    private static readonly string KeyA = Convert.ToBase64String(Enumerable.Range(1, 32).Select(i => (byte)i).ToArray());
    private static readonly string KeyB = Convert.ToBase64String(Enumerable.Range(101, 32).Select(i => (byte)i).ToArray());

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static LogOptions Options(string directory, string? key = null, params string[] previous)
    {
        var options = LogTestOptions.Small(directory);
        options.Encryption.Key = key;
        foreach (var p in previous)
        {
            options.Encryption.PreviousKeys.Add(p);
        }

        return options;
    }

    private static Payload Secret(uint tag) => new() { Tag = tag, Data = ByteString.CopyFromUtf8($"secret-body-{tag:D5}-" + new string('s', (int)(tag % 700))) };

    private static string AllFiles(string directory) =>
        string.Concat(Directory.GetFiles(directory).Select(f => Encoding.Latin1.GetString(File.ReadAllBytes(f))));

    private static async Task<List<LogRecord>> ReadAllAsync(DurableLog log)
    {
        var records = new List<LogRecord>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            records.Add(record);
        }

        return records;
    }

    private static async Task<List<(long Lsn, Payload Payload)>> WriteAsync(string directory, LogOptions options, uint from, int count)
    {
        var written = new List<(long, Payload)>();
        await using var log = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        for (var i = 0u; i < count; i++)
        {
            var payload = Secret(from + i);
            written.Add((log.Append(RecordKind.Payload, payload), payload));
            if (i % 7 == 6)
            {
                await log.WaitUntilDurableAsync(written[^1].Item1, Ct);
            }
        }

        await log.WaitUntilDurableAsync(written[^1].Item1, Ct);
        return written;
    }

    private static Dictionary<string, string> Describe(string directory) =>
        Directory.GetFiles(directory).Where(f => Path.GetFileName(f) != "directory.lock")
            .ToDictionary(f => Path.GetFileName(f), f => Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f))));

    [Fact]
    public async Task Append_WithKey_NoBodyInClearInAnyFile_EveryRecordReadsBackAfterReopen_AcrossPagesSegmentsAndTwoWalkers()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 1500);
        Assert.True(SegmentFiles.List(dir.Path).Count > 3, "the test must cross segment boundaries");

        var files = AllFiles(dir.Path);
        Assert.DoesNotContain("secret-body-", files, StringComparison.Ordinal);
        Assert.DoesNotContain(new string('s', 64), files, StringComparison.Ordinal);

        await using var log = await DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct);
        Assert.Equal(written.Count, log.OpenReport.RecordsVerified);
        Assert.True(log.OpenReport.WalkedInTwo || Environment.ProcessorCount < 2, "a log this long is walked by two walkers");
        var records = await ReadAllAsync(log);
        Assert.Equal(written.Select(w => w.Lsn), records.Select(r => r.Lsn));
        Assert.Equal(written.Select(w => w.Payload), records.Select(r => r.Parse(Payload.Parser)));
        Assert.All(records, r => Assert.NotNull(r.Header.KeyId));
        Assert.Equal(written[700].Payload, (await log.ReadAsync(written[700].Lsn, Ct)).Parse(Payload.Parser));
        Assert.Equal(LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyA))), log.EncryptionKeyId);
    }

    [Fact]
    public async Task Append_WithoutKey_WritesInClear_AsEveryEarlierBuild()
    {
        using var dir = new TempDirectory();
        await WriteAsync(dir.Path, Options(dir.Path), 0, 20);

        Assert.Contains("secret-body-00003", AllFiles(dir.Path), StringComparison.Ordinal);
        await using var log = await DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct);
        Assert.Null(log.EncryptionKeyId);
        Assert.All(await ReadAllAsync(log), r => Assert.Null(r.Header.KeyId));
    }

    [Fact]
    public async Task Open_EncryptedLog_WithoutKey_Refuses_NamingTheKeyId_AndChangesNothing()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 30);
        var before = Describe(dir.Path);

        var error = await Assert.ThrowsAsync<LogEncryptionKeyException>(() => DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct));

        Assert.Equal(written[0].Lsn, error.Address);
        Assert.Equal(LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyA))), error.KeyId);
        Assert.Contains("no log key is configured", error.Message, StringComparison.Ordinal);
        Assert.Contains("LogOptions.Encryption.Key", error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(KeyA, error.Message, StringComparison.Ordinal);
        Assert.Equal(before, Describe(dir.Path));

        // Still whole: with the key it opens.
        await using var log = await DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct);
        Assert.Equal(written.Count, (await ReadAllAsync(log)).Count);
    }

    [Fact]
    public async Task Open_EncryptedLog_WithWrongKey_Refuses_NamingBothKeyIds_AndChangesNothing()
    {
        using var dir = new TempDirectory();
        await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 30);
        var before = Describe(dir.Path);

        var error = await Assert.ThrowsAsync<LogEncryptionKeyException>(() => DurableLog.OpenAsync(Options(dir.Path, KeyB), cancellationToken: Ct));

        var idA = LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyA)));
        var idB = LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyB)));
        Assert.Contains($"key id {idA}, which is not among the configured log keys (configured: current {idB})", error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(KeyA, error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(KeyB, error.Message, StringComparison.Ordinal);
        Assert.Equal(before, Describe(dir.Path));
    }

    [Fact]
    public async Task Open_SealedRecordChangedWithChecksumsRecomputed_IsCorruptionNamingItsLsn_AndChangesNothing()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 30);
        var target = written[10].Lsn;
        Tamper(dir.Path, target);
        var before = Describe(dir.Path);

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct));

        Assert.Equal(target, error.Address);
        Assert.Contains($"address {target}", error.Message, StringComparison.Ordinal);
        Assert.Contains("fails authentication", error.Message, StringComparison.Ordinal);
        Assert.Equal(before, Describe(dir.Path));
    }

    [Fact]
    public async Task Open_SealedRecordChangedAfterTheLastCommit_IsCorruption_NotATornTailCutAway()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 30);

        // The last commit record goes (as a crash before it was written leaves the log), and the commit metadata with it,
        // so the last records are after the last commit: damage there would be a torn tail. One of them is changed and its
        // checksums recomputed: no crash does that, so the open refuses rather than cut it away.
        var entries = Entries(File.ReadAllBytes(dir.Combine("log.0")));
        var lastCommit = entries.Last(e => e.Length < 0);
        var previousCommit = entries.Last(e => e.Length < 0 && e.Address < lastCommit.Address);
        var uncommitted = entries.First(e => e.Length > 0 && e.Address > previousCommit.Address);
        using (var file = File.OpenHandle(dir.Combine("log.0"), FileMode.Open, FileAccess.Write))
        {
            RandomAccess.Write(file, new byte[FasterEntryLayout.EntrySize(-lastCommit.Length)], lastCommit.Address);
        }

        File.Delete(dir.Combine(CommitMetadataFile.FileName));
        Tamper(dir.Path, uncommitted.Address);

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct));

        Assert.Equal(uncommitted.Address, error.Address);
        Assert.Contains("fails authentication", error.Message, StringComparison.Ordinal);
        Assert.Contains("a crash never leaves such a record", error.Message, StringComparison.Ordinal);
        Assert.Contains(written.Select(w => w.Lsn), lsn => lsn == uncommitted.Address);
    }

    [Fact]
    public async Task Open_TornTailOfSealedRecords_IsCutAsBefore_EveryDurableRecordStays()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 30);

        // A write cut short: garbage over the last commit record and what follows it (the checksum fails, as a torn write's does).
        var entries = Entries(File.ReadAllBytes(dir.Combine("log.0")));
        var lastCommit = entries.Last(e => e.Length < 0);
        var previousCommit = entries.Last(e => e.Length < 0 && e.Address < lastCommit.Address);
        var garbage = new byte[200];
        new Random(5).NextBytes(garbage);
        var cutFrom = entries.First(e => e.Length > 0 && e.Address > previousCommit.Address).Address + 40;
        using (var file = File.OpenHandle(dir.Combine("log.0"), FileMode.Open, FileAccess.Write))
        {
            RandomAccess.Write(file, garbage, cutFrom);
            RandomAccess.Write(file, new byte[FasterEntryLayout.EntrySize(-lastCommit.Length)], lastCommit.Address);
        }

        File.Delete(dir.Combine(CommitMetadataFile.FileName));

        await using var log = await DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct);
        var committed = previousCommit.Address + FasterEntryLayout.EntrySize(-previousCommit.Length);
        Assert.NotNull(log.OpenReport.TornTail);
        Assert.Equal(committed, log.DurableUntil);
        var records = await ReadAllAsync(log);
        Assert.Equal(written.Where(w => w.Lsn < committed).Select(w => w.Payload), records.Select(r => r.Parse(Payload.Parser)));
    }

    [Fact]
    public async Task Rotation_NewKeyWithOldAsPrevious_ReadsOldRecords_WritesWithTheNewKey_AndTheOldKeyIsNeededUntilItsRecordsAreGone()
    {
        using var dir = new TempDirectory();
        var old = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 20);
        var rotated = await WriteAsync(dir.Path, Options(dir.Path, KeyB, KeyA), 100, 20);

        var idA = LogKey.IdOf(Convert.FromBase64String(KeyA));
        var idB = LogKey.IdOf(Convert.FromBase64String(KeyB));
        await using (var log = await DurableLog.OpenAsync(Options(dir.Path, KeyB, KeyA), cancellationToken: Ct))
        {
            var records = await ReadAllAsync(log);
            Assert.Equal([.. old.Select(w => w.Payload), .. rotated.Select(w => w.Payload)], records.Select(r => r.Parse(Payload.Parser)));
            Assert.All(records.Take(old.Count), r => Assert.Equal(idA, r.Header.KeyId));
            Assert.All(records.Skip(old.Count), r => Assert.Equal(idB, r.Header.KeyId));
        }

        // Without the old key, its records cannot be read: refused, naming it.
        var error = await Assert.ThrowsAsync<LogEncryptionKeyException>(() => DurableLog.OpenAsync(Options(dir.Path, KeyB), cancellationToken: Ct));
        Assert.Equal(LogKey.Format(idA), error.KeyId);

        // Once the log's begin has moved past them, the old key is no longer needed.
        await using (var log = await DurableLog.OpenAsync(Options(dir.Path, KeyB, KeyA), cancellationToken: Ct))
        {
            await log.TruncateUntilAsync(rotated[0].Lsn, Ct);
        }

        await using (var log = await DurableLog.OpenAsync(Options(dir.Path, KeyB), cancellationToken: Ct))
        {
            Assert.Equal(rotated.Select(w => w.Payload), (await ReadAllAsync(log)).Where(r => r.Kind == RecordKind.Payload).Select(r => r.Parse(Payload.Parser)));
        }
    }

    [Fact]
    public async Task KeySetOnALogWrittenInClear_OldRecordsStayReadable_NewOnesAreSealed_AndTheKeyIsNeededFromThenOn()
    {
        using var dir = new TempDirectory();
        var plain = await WriteAsync(dir.Path, Options(dir.Path), 0, 10);
        var sealedRecords = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 100, 10);

        var files = AllFiles(dir.Path);
        Assert.Contains("secret-body-00003", files, StringComparison.Ordinal); // written in clear before the key was set
        Assert.DoesNotContain("secret-body-00103", files, StringComparison.Ordinal);

        await using (var log = await DurableLog.OpenAsync(Options(dir.Path, KeyA), cancellationToken: Ct))
        {
            var records = await ReadAllAsync(log);
            Assert.Equal([.. plain.Select(w => w.Payload), .. sealedRecords.Select(w => w.Payload)], records.Select(r => r.Parse(Payload.Parser)));
            Assert.All(records.Take(plain.Count), r => Assert.Null(r.Header.KeyId));
            Assert.All(records.Skip(plain.Count), r => Assert.NotNull(r.Header.KeyId));
        }

        await Assert.ThrowsAsync<LogEncryptionKeyException>(() => DurableLog.OpenAsync(Options(dir.Path), cancellationToken: Ct));

        // Turning encryption off for new records: the key stays as a previous key, to read what it sealed.
        var later = await WriteAsync(dir.Path, Options(dir.Path, null, KeyA), 200, 5);
        Assert.Contains("secret-body-00203", AllFiles(dir.Path), StringComparison.Ordinal);
        await using (var log = await DurableLog.OpenAsync(Options(dir.Path, null, KeyA), cancellationToken: Ct))
        {
            Assert.Equal(plain.Count + sealedRecords.Count + later.Count, (await ReadAllAsync(log)).Count);
        }
    }

    [Fact]
    public async Task SealedRecords_UseFreshNonces_AndTheirLsnIsBound_ACopyToAnotherAddressFailsAuthentication()
    {
        using var dir = new TempDirectory();
        var written = await WriteAsync(dir.Path, Options(dir.Path, KeyA), 0, 40);
        var bytes = File.ReadAllBytes(dir.Combine("log.0"));
        var nonces = written.Select(w => Convert.ToHexString(bytes, (int)w.Lsn + FasterEntryLayout.HeaderSize + RecordEnvelope.NonceOffset, RecordEnvelope.NonceSize)).ToList();
        Assert.Equal(nonces.Count, nonces.Distinct().Count());

        // The same record with another LSN in its header (its CRC recomputed): the LSN is associated data.
        var entry = bytes.AsSpan((int)written[3].Lsn + FasterEntryLayout.HeaderSize, RecordEnvelope.HeaderSize + BinaryPrimitives.ReadInt32LittleEndian(bytes.AsSpan((int)written[3].Lsn + FasterEntryLayout.HeaderSize + 16))).ToArray();
        BinaryPrimitives.WriteInt64LittleEndian(entry.AsSpan(8), 8192);
        BinaryPrimitives.WriteUInt32LittleEndian(entry, Crc32C.Compute(entry.AsSpan(4)));
        using var keys = LogKeyRing.Create(Options(dir.Path, KeyA).Encryption);
        var error = Assert.Throws<LogCorruptionException>(() => LogRecord.FromEntry(entry, entry.Length, 8192, keys));
        Assert.Contains("fails authentication", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Sealer_DrawsANewDataKeySalt_AfterItsRecordsPerDataKey_EveryRecordStillOpens()
    {
        using var keys = LogKeyRing.Create(new LogEncryptionOptions { Key = KeyA })!;
        using var sealer = new RecordSealer(keys.Current!, recordsPerDataKey: 3);
        var body = Secret(1).ToByteArray();
        var salts = new List<string>();
        for (var i = 0; i < 7; i++)
        {
            var lsn = 64 + (i * 4096);
            var entry = new byte[RecordEnvelope.HeaderSize + RecordEnvelope.SealedOverhead + body.Length];
            RecordEnvelope.WriteSealed(entry, lsn, RecordKind.Payload, RecordFlags.None, body, sealer);
            salts.Add(Convert.ToHexString(entry, RecordEnvelope.SaltOffset, RecordEnvelope.SaltSize));
            Assert.Equal(Secret(1), LogRecord.FromEntry(entry, entry.Length, lsn, keys).Parse(Payload.Parser));
        }

        Assert.Equal(3, salts.Distinct().Count());
        Assert.Equal(salts[0], salts[2]);
        Assert.NotEqual(salts[2], salts[3]);
        Assert.Equal(salts[3], salts[5]);
        Assert.NotEqual(salts[5], salts[6]);
    }

    [Theory]
    [InlineData("not base64!", "is not valid base64")]
    [InlineData("AAECAwQFBgcICQoLDA0ODw==", "it holds 16 bytes")]
    public void Validate_BadKey_NamesTheOption_NeverTheValue(string key, string expected)
    {
        var options = LogTestOptions.Small("/tmp/x");
        options.Encryption.Key = key;

        var error = Assert.Throws<ArgumentException>(options.Validate);

        Assert.Contains("LogOptions.Encryption.Key", error.Message, StringComparison.Ordinal);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(key, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Validate_SameKeyTwice_IsRefused()
    {
        var options = LogTestOptions.Small("/tmp/x");
        options.Encryption.Key = KeyA;
        options.Encryption.PreviousKeys.Add(KeyA);

        var error = Assert.Throws<ArgumentException>(options.Validate);

        Assert.Contains("LogOptions.Encryption.PreviousKeys[0] repeats a key", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Validate_WithKey_MaxRecordBytesLeavesRoomForTheSealedFields()
    {
        var options = LogTestOptions.Small("/tmp/x");
        options.MaxRecordBytes = options.PageSize / 2 - LogOptions.EntryOverhead;
        options.Validate();

        options.Encryption.Key = KeyA;
        var error = Assert.Throws<ArgumentException>(options.Validate);

        Assert.Contains("LogOptions.MaxRecordBytes", error.Message, StringComparison.Ordinal);
    }

    /// <summary>The entries of a segment file (address, FASTER length: negative for a commit record), from its first address.</summary>
    internal static List<(long Address, int Length)> Entries(byte[] segment, int pageSize = 1 << 14)
    {
        var entries = new List<(long, int)>();
        var address = FasterEntryLayout.FirstValidAddress;
        while (address + FasterEntryLayout.HeaderSize <= segment.Length)
        {
            var pageStart = address & ~((long)pageSize - 1);
            if (address - pageStart + FasterEntryLayout.HeaderSize > pageSize)
            {
                address = pageStart + pageSize;
                continue;
            }

            var length = FasterEntryLayout.ReadLength(segment.AsSpan((int)address));
            if (length == 0)
            {
                if (address == pageStart)
                {
                    break;
                }

                address = pageStart + pageSize;
                continue;
            }

            entries.Add((address, length));
            address += FasterEntryLayout.EntrySize(Math.Abs(length));
        }

        return entries;
    }

    /// <summary>
    /// Changes one byte of the sealed body of the record at <paramref name="lsn"/> (segment 0) and recomputes both checksums
    /// (the envelope's CRC-32C and FASTER's XOR), as someone who can write the files but has no key would: only the tag can tell.
    /// </summary>
    internal static void Tamper(string directory, long lsn)
    {
        var path = Path.Combine(directory, "log.0");
        var bytes = File.ReadAllBytes(path);
        var at = (int)lsn;
        var length = FasterEntryLayout.ReadLength(bytes.AsSpan(at));
        var envelope = bytes.AsSpan(at + FasterEntryLayout.HeaderSize, length);
        Assert.Equal(RecordEnvelope.SealedFormatVersion, envelope[4]);
        envelope[RecordEnvelope.CiphertextOffset + 1] ^= 0x20;
        BinaryPrimitives.WriteUInt32LittleEndian(envelope, Crc32C.Compute(envelope[4..]));
        ulong xor = 0;
        var span = bytes.AsSpan(at + 8, length + 4);
        while (span.Length >= 8)
        {
            xor ^= BinaryPrimitives.ReadUInt64LittleEndian(span);
            span = span[8..];
        }

        foreach (var b in span)
        {
            xor ^= b;
        }

        BinaryPrimitives.WriteUInt64LittleEndian(bytes.AsSpan(at), xor);
        Assert.True(FasterEntryLayout.ChecksumMatches(bytes.AsSpan(at), length));
        File.WriteAllBytes(path, bytes);
    }
}
