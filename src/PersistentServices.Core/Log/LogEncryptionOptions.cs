using System.Security.Cryptography;
using PersistentServices.Log;

namespace PersistentServices;

/// <summary>
/// Encryption of the log's records at rest (docs/operations.md, "Encrypting the log"): every record the log writes (requests,
/// replies, call replies, checkpoints, shared values) is sealed with AES-256-GCM under a key the application provides, so
/// the log directory and its copies hold no request or reply in clear. No key (the default): records are written in clear,
/// as before, at no cost. A log can only be read with the keys its records were written with: a log whose key is lost is
/// lost. Validated when the log opens; a key is never printed (only its id, 8 hex digits derived from it).
/// </summary>
public sealed class LogEncryptionOptions
{
    /// <summary>Bytes of an AES-256 key.</summary>
    public const int KeyBytes = 32;

    /// <summary>
    /// The key new records are written with: 32 random bytes, base64 (44 characters; <c>openssl rand -base64 32</c>). Records
    /// written with it, or with one of <see cref="PreviousKeys"/>, are read. Null or empty (the default): new records are
    /// written in clear. Set on a log written in clear, the records already there stay readable (and in clear) and new ones
    /// are encrypted.
    /// </summary>
    public string? Key { get; set; }

    /// <summary>
    /// Keys that wrote older records of the log and are no longer used to write: each 32 bytes, base64. Keep a key here
    /// after rotating to a new <see cref="Key"/> until no record written with it is left (<c>psctl verify</c> lists the keys
    /// the log's records use; records leave the log as its begin address moves past them, docs/checkpoints.md).
    /// </summary>
    public IList<string> PreviousKeys { get; } = [];

    /// <summary>True when any key is configured (new records are encrypted only when <see cref="Key"/> is set).</summary>
    internal bool HasKeys => !string.IsNullOrWhiteSpace(Key) || PreviousKeys.Count > 0;

    /// <summary>Throws <see cref="ArgumentException"/> naming the first invalid option (never its value).</summary>
    public void Validate()
    {
        if (!HasKeys)
        {
            return;
        }

        if (!AesGcm.IsSupported)
        {
            throw new ArgumentException(
                "LogOptions.Encryption: AES-GCM is not supported on this platform (System.Security.Cryptography.AesGcm.IsSupported is false), so the log cannot be encrypted or read.",
                nameof(Key));
        }

        var ids = new HashSet<uint>();
        if (!string.IsNullOrWhiteSpace(Key))
        {
            ids.Add(LogKey.IdOf(Decode(Key, "LogOptions.Encryption.Key")));
        }

        for (var i = 0; i < PreviousKeys.Count; i++)
        {
            var name = $"LogOptions.Encryption.PreviousKeys[{i}]";
            if (string.IsNullOrWhiteSpace(PreviousKeys[i]))
            {
                throw new ArgumentException($"{name} is empty: give a 32-byte key in base64, or remove the entry.", nameof(PreviousKeys));
            }

            var id = LogKey.IdOf(Decode(PreviousKeys[i], name));
            if (!ids.Add(id))
            {
                throw new ArgumentException($"{name} repeats a key already configured (key id {LogKey.Format(id)}): list each key once.", nameof(PreviousKeys));
            }
        }
    }

    /// <summary>The key bytes of a base64 key; <paramref name="name"/> names the option in the error.</summary>
    internal static byte[] Decode(string base64, string name)
    {
        var text = base64.Trim();
        var buffer = new byte[(text.Length * 3 / 4) + 3];
        if (!Convert.TryFromBase64String(text, buffer, out var written))
        {
            throw new ArgumentException(
                $"{name} is not valid base64: give a 256-bit key as 32 bytes in base64 (44 characters, e.g. from 'openssl rand -base64 32').", name);
        }

        if (written != KeyBytes)
        {
            CryptographicOperations.ZeroMemory(buffer);
            throw new ArgumentException(
                $"{name} must be a 256-bit AES key, 32 bytes in base64 (44 characters, e.g. from 'openssl rand -base64 32'); it holds {written} bytes.", name);
        }

        return buffer[..KeyBytes];
    }

    internal LogEncryptionOptions Clone()
    {
        var clone = new LogEncryptionOptions { Key = Key };
        foreach (var key in PreviousKeys)
        {
            clone.PreviousKeys.Add(key);
        }

        return clone;
    }
}
