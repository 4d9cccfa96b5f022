using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.Security.Cryptography;

namespace PersistentServices.Log;

/// <summary>
/// One configured log key (<see cref="LogEncryptionOptions"/>): 32 bytes, and its id, the first four bytes of
/// HMAC-SHA256(key, "PersistentServices log key id v1"). The id is written in every record sealed with the key, so a reader
/// knows which key a record needs, and says so by id when that key is not configured: a wrong key has another id.
/// Records are not sealed with this key itself but with a data key derived from it and a random 16-byte salt
/// (HKDF-SHA256, <see cref="DeriveDataKey"/>): the salt is chosen when a log opens and again every
/// <see cref="RecordSealer.RecordsPerDataKey"/> records, so no data key ever seals more than that many records under
/// random 96-bit nonces (the birthday bound of GCM's random nonces, NIST SP 800-38D §8.3, is 2^32 per key; a busy log
/// writes that many records in days).
/// </summary>
internal sealed class LogKey : IDisposable
{
    private static readonly byte[] IdLabel = "PersistentServices log key id v1"u8.ToArray();
    private static readonly byte[] DataKeyInfo = "PersistentServices log record key v1"u8.ToArray();

    private readonly byte[] _material;

    public LogKey(byte[] material)
    {
        if (material.Length != LogEncryptionOptions.KeyBytes)
        {
            throw new ArgumentException($"A log key has {LogEncryptionOptions.KeyBytes} bytes.", nameof(material));
        }

        _material = material;
        Id = IdOf(material);
    }

    public uint Id { get; }

    public string IdText => Format(Id);

    public static uint IdOf(ReadOnlySpan<byte> key)
    {
        Span<byte> mac = stackalloc byte[HMACSHA256.HashSizeInBytes];
        HMACSHA256.HashData(key, IdLabel, mac);
        return BinaryPrimitives.ReadUInt32BigEndian(mac);
    }

    public static string Format(uint id) => id.ToString("x8", System.Globalization.CultureInfo.InvariantCulture);

    /// <summary>The AES-256 key that seals the records carrying <paramref name="salt"/>.</summary>
    public void DeriveDataKey(ReadOnlySpan<byte> salt, Span<byte> dataKey)
        => HKDF.DeriveKey(HashAlgorithmName.SHA256, _material, dataKey, salt, DataKeyInfo);

    public void Dispose() => CryptographicOperations.ZeroMemory(_material);
}

/// <summary>
/// The keys a log is read with (the current one and the previous ones, <see cref="LogEncryptionOptions"/>), and the
/// opening of sealed records. Thread-safe: recovery's two walkers, replay and readers of the open log open records at once.
/// Data keys are derived once per salt and kept (a log holds one salt per open, and one more per
/// <see cref="RecordSealer.RecordsPerDataKey"/> records); each keeps a few <see cref="AesGcm"/> instances, which are not
/// safe to share between threads.
/// </summary>
internal sealed class LogKeyRing : IDisposable
{
    private const int MaxDataKeys = 1024;

    private readonly Dictionary<uint, LogKey> _keys = [];
    private readonly ConcurrentDictionary<(uint KeyId, UInt128 Salt), DataKey> _dataKeys = new();

    private LogKeyRing(LogKey? current, IReadOnlyList<LogKey> previous)
    {
        Current = current;
        Previous = previous;
        if (current is not null)
        {
            _keys[current.Id] = current;
        }

        foreach (var key in previous)
        {
            _keys.TryAdd(key.Id, key);
        }
    }

    /// <summary>The key new records are sealed with; null when new records are written in clear.</summary>
    public LogKey? Current { get; }

    public IReadOnlyList<LogKey> Previous { get; }

    /// <summary>The configured keys, or null when none is (records are written in clear, and a sealed record cannot be read).</summary>
    public static LogKeyRing? Create(LogEncryptionOptions? options)
    {
        if (options is null || !options.HasKeys)
        {
            return null;
        }

        options.Validate();
        var current = string.IsNullOrWhiteSpace(options.Key) ? null : new LogKey(LogEncryptionOptions.Decode(options.Key, "LogOptions.Encryption.Key"));
        var previous = options.PreviousKeys
            .Select((key, i) => new LogKey(LogEncryptionOptions.Decode(key, $"LogOptions.Encryption.PreviousKeys[{i}]")))
            .ToList();
        return new LogKeyRing(current, previous);
    }

    /// <summary>What is configured, by key id, for messages: "current 1a2b3c4d; previous 5e6f7a8b" ("none" without keys).</summary>
    public static string Describe(LogKeyRing? ring)
    {
        if (ring is null)
        {
            return "none";
        }

        var parts = new List<string>();
        if (ring.Current is { } current)
        {
            parts.Add($"current {current.IdText}");
        }

        if (ring.Previous.Count > 0)
        {
            parts.Add("previous " + string.Join(", ", ring.Previous.Select(k => k.IdText)));
        }

        return string.Join("; ", parts);
    }

    /// <summary>
    /// Opens the sealed record <paramref name="entry"/> (its envelope, verified: <see cref="RecordEnvelope.Verify"/>) into
    /// <paramref name="plaintext"/> (<c>stored length - </c><see cref="RecordEnvelope.SealedOverhead"/> bytes). False when
    /// it fails authentication (AES-256-GCM over the body, with the envelope's header as associated data). Throws
    /// <see cref="LogEncryptionKeyException"/> when <paramref name="ring"/> does not hold the key the record names.
    /// </summary>
    public static bool Open(LogKeyRing? ring, ReadOnlySpan<byte> entry, RecordHeader header, Span<byte> plaintext)
    {
        var keyId = header.KeyId ?? throw new ArgumentException("The record is not sealed.", nameof(header));
        if (ring is null || !ring._keys.TryGetValue(keyId, out var key))
        {
            throw LogEncryptionKeyException.Missing(header.Lsn, keyId, ring);
        }

        var length = header.BodyLength - RecordEnvelope.SealedOverhead;
        var dataKey = ring.DataKeyFor(key, entry.Slice(RecordEnvelope.SaltOffset, RecordEnvelope.SaltSize));
        var aes = dataKey.Rent();
        try
        {
            aes.Decrypt(
                entry.Slice(RecordEnvelope.NonceOffset, RecordEnvelope.NonceSize),
                entry.Slice(RecordEnvelope.CiphertextOffset, length),
                entry.Slice(RecordEnvelope.CiphertextOffset + length, RecordEnvelope.TagSize),
                plaintext[..length],
                entry[RecordEnvelope.AssociatedData]);
            return true;
        }
        catch (AuthenticationTagMismatchException)
        {
            plaintext[..length].Clear();
            return false;
        }
        finally
        {
            dataKey.Return(aes);
        }
    }

    public void Dispose()
    {
        foreach (var dataKey in _dataKeys.Values)
        {
            dataKey.Dispose();
        }

        _dataKeys.Clear();
        foreach (var key in _keys.Values)
        {
            key.Dispose();
        }
    }

    private DataKey DataKeyFor(LogKey key, ReadOnlySpan<byte> salt)
    {
        var id = (key.Id, BinaryPrimitives.ReadUInt128LittleEndian(salt));
        if (_dataKeys.TryGetValue(id, out var found))
        {
            return found;
        }

        if (_dataKeys.Count >= MaxDataKeys)
        {
            // A long log read from its begin meets its salts in order: forget the older ones (their instances are finalized).
            _dataKeys.Clear();
        }

        Span<byte> material = stackalloc byte[LogEncryptionOptions.KeyBytes];
        key.DeriveDataKey(salt, material);
        var created = new DataKey(material);
        CryptographicOperations.ZeroMemory(material);
        return _dataKeys.GetOrAdd(id, created);
    }

    /// <summary>A derived data key and a few AES-GCM instances for it (an instance is used by one thread at a time).</summary>
    private sealed class DataKey(ReadOnlySpan<byte> material) : IDisposable
    {
        private readonly byte[] _material = material.ToArray();
        private readonly ConcurrentBag<AesGcm> _pool = [];

        public AesGcm Rent() => _pool.TryTake(out var aes) ? aes : new AesGcm(_material, RecordEnvelope.TagSize);

        public void Return(AesGcm aes)
        {
            if (_pool.Count < 2 * Environment.ProcessorCount)
            {
                _pool.Add(aes);
            }
            else
            {
                aes.Dispose();
            }
        }

        public void Dispose()
        {
            while (_pool.TryTake(out var aes))
            {
                aes.Dispose();
            }

            CryptographicOperations.ZeroMemory(_material);
        }
    }
}

/// <summary>
/// Seals the records a log appends with its current key (<see cref="LogKeyRing.Current"/>). Used only under the log's append
/// lock. Each record gets a fresh random 96-bit nonce, never one derived from its LSN: after a crash the torn tail is cut
/// and its LSNs are written again with other content, which would reuse a (key, nonce) pair. The data key comes from a
/// random salt chosen at open and again every <see cref="RecordsPerDataKey"/> records (<see cref="LogKey"/>).
/// </summary>
internal sealed class RecordSealer : IDisposable
{
    /// <summary>Records one data key seals at most (2^24): the chance of two equal random nonces under one data key stays below 2^-48.</summary>
    public const long RecordsPerDataKey = 1L << 24;

    /// <summary>Nonces drawn from the system's generator at once: one call costs 3–4 µs here, as much as sealing a record.</summary>
    private const int NoncesPerDraw = 256;

    private readonly LogKey _key;
    private readonly byte[] _salt = new byte[RecordEnvelope.SaltSize];
    private readonly byte[] _nonces = new byte[NoncesPerDraw * RecordEnvelope.NonceSize];
    private int _nextNonce = NoncesPerDraw;
    private AesGcm? _aes;
    private long _sealed;

    private readonly long _recordsPerDataKey;

    public RecordSealer(LogKey key, long recordsPerDataKey = RecordsPerDataKey)
    {
        _key = key;
        _recordsPerDataKey = recordsPerDataKey;
        Renew();
    }

    /// <summary>Records sealed since the log opened.</summary>
    public long Sealed => _sealed;

    public uint KeyId => _key.Id;

    /// <summary>
    /// Seals <paramref name="plaintext"/> into <paramref name="entry"/>, a sealed envelope whose header (version, flags,
    /// kind, LSN, stored length) is written: writes the key id, the salt, a random nonce, the ciphertext and the tag, the
    /// header through the salt being the associated data (<see cref="RecordEnvelope"/>).
    /// </summary>
    public void Seal(Span<byte> entry, ReadOnlySpan<byte> plaintext)
    {
        if (_sealed > 0 && _sealed % _recordsPerDataKey == 0)
        {
            Renew();
        }

        BinaryPrimitives.WriteUInt32LittleEndian(entry[RecordEnvelope.KeyIdOffset..], _key.Id);
        _salt.CopyTo(entry[RecordEnvelope.SaltOffset..]);
        if (_nextNonce == NoncesPerDraw)
        {
            RandomNumberGenerator.Fill(_nonces);
            _nextNonce = 0;
        }

        // Each nonce is used once: random bytes of the system's generator, drawn 256 at a time.
        var nonce = entry.Slice(RecordEnvelope.NonceOffset, RecordEnvelope.NonceSize);
        _nonces.AsSpan(_nextNonce++ * RecordEnvelope.NonceSize, RecordEnvelope.NonceSize).CopyTo(nonce);
        _aes!.Encrypt(
            nonce,
            plaintext,
            entry.Slice(RecordEnvelope.CiphertextOffset, plaintext.Length),
            entry.Slice(RecordEnvelope.CiphertextOffset + plaintext.Length, RecordEnvelope.TagSize),
            entry[RecordEnvelope.AssociatedData]);
        _sealed++;
    }

    public void Dispose() => _aes?.Dispose();

    private void Renew()
    {
        RandomNumberGenerator.Fill(_salt);
        Span<byte> material = stackalloc byte[LogEncryptionOptions.KeyBytes];
        _key.DeriveDataKey(_salt, material);
        _aes?.Dispose();
        _aes = new AesGcm(material, RecordEnvelope.TagSize);
        CryptographicOperations.ZeroMemory(material);
    }
}
