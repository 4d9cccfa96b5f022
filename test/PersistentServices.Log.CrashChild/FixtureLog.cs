using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Log.CrashChild;

/// <summary>
/// The small log checked in under test/PersistentServices.Core.Tests/Fixtures/log-v1, which every later build must
/// still read (docs/log-format.md, "Version rules"). Written by <c>CrashChild write-fixture DIR</c>; the tests use
/// <see cref="Expected"/> and compare a fresh write with the checked-in bytes.
/// <para>
/// Fixtures/log-v2-sealed (<c>CrashChild write-fixture DIR sealed</c>) holds the same records, the first six in clear,
/// three sealed with <see cref="SealedKeyA"/> (envelope version 2) and the last three with <see cref="SealedKeyB"/> after
/// a rotation: what a log holds when encryption is turned on and its key rotated. Its sealed bytes differ at every write
/// (random nonces and salts), so the tests read it; they cannot compare it with a fresh write.
/// </para>
/// </summary>
internal static class FixtureLog
{
    public const string Name = "log-v1";

    public const string SealedName = "log-v2-sealed";

    /// <summary>Test keys of the sealed fixture (never use a published key for a real log).</summary>
    public static readonly string SealedKeyA = Convert.ToBase64String([.. Enumerable.Range(0, 32).Select(i => (byte)(0xA0 + i))]);

    public static readonly string SealedKeyB = Convert.ToBase64String([.. Enumerable.Range(0, 32).Select(i => (byte)(0x50 + i))]);
    private const int Records = 12;
    private const int TruncateBefore = 2;

    public static LogOptions Options(string directory) => new()
    {
        Directory = directory,
        PageSizeBits = 12,
        MemorySizeBits = 14,
        SegmentSizeBits = 14,
        MaxRecordBytes = 1024,
        MetadataFlushInterval = TimeSpan.Zero,
    };

    /// <summary>The records the fixture holds, in order, after its truncation.</summary>
    public static IReadOnlyList<(RecordKind Kind, IMessage Body)> Expected(long truncatedUntil)
    {
        var records = new List<(RecordKind, IMessage)>();
        for (var i = TruncateBefore; i < Records; i++)
        {
            records.Add((RecordKind.Payload, PayloadOf(i)));
            if (i == 5)
            {
                records.Add((RecordKind.LogTruncated, new LogTruncated { UntilLsn = truncatedUntil }));
            }
        }

        return records;
    }

    /// <summary>The options of the sealed fixture when it is read: both keys, B the current one.</summary>
    public static LogOptions SealedOptions(string directory, bool withKeyA = true)
    {
        var options = Options(directory);
        options.Encryption.Key = SealedKeyB;
        if (withKeyA)
        {
            options.Encryption.PreviousKeys.Add(SealedKeyA);
        }

        return options;
    }

    /// <summary>
    /// Writes the fixture into an empty <paramref name="directory"/>: 12 payloads in 4 commits, the first 2 truncated.
    /// <paramref name="sealedRecords"/>: records 6–8 sealed with key A, 9–11 with key B (the log reopened at each change).
    /// </summary>
    public static async Task WriteAsync(string directory, bool sealedRecords = false)
    {
        var log = await DurableLog.OpenAsync(Options(directory));
        var lsns = new List<long>();
        for (var i = 0; i < Records; i++)
        {
            if (sealedRecords && i is 6 or 9)
            {
                await log.DisposeAsync();
                var options = Options(directory);
                options.Encryption.Key = i == 6 ? SealedKeyA : SealedKeyB;
                if (i == 9)
                {
                    options.Encryption.PreviousKeys.Add(SealedKeyA);
                }

                log = await DurableLog.OpenAsync(options);
            }

            lsns.Add(log.Append(RecordKind.Payload, PayloadOf(i)));
            if (i % 3 == 2)
            {
                await log.WaitUntilDurableAsync(lsns[^1]);
            }

            if (i == 5)
            {
                await log.TruncateUntilAsync(lsns[TruncateBefore]);
            }
        }

        await log.WaitUntilDurableAsync(lsns[^1]);
        await log.DisposeAsync();
    }

    private static Payload PayloadOf(int i) => new()
    {
        Tag = (uint)(1000 + i),
        Data = ByteString.CopyFromUtf8(string.Concat(Enumerable.Repeat($"record {i}; ", 1 + i % 5))),
    };
}
