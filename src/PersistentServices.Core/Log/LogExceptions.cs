using PersistentServices.Log;

namespace PersistentServices;

/// <summary>
/// A committed part of the log is damaged. Recovery stops here rather than skip or lose committed records
/// (fail-stop); the message names the address and the file.
/// </summary>
public sealed class LogCorruptionException : IOException
{
    /// <summary>Creates the exception.</summary>
    public LogCorruptionException(string message, long address, string? file = null, long fileOffset = -1)
        : base(message)
    {
        Address = address;
        File = file;
        FileOffset = fileOffset;
    }

    /// <summary>Creates the exception.</summary>
    public LogCorruptionException(string message, long address, Exception innerException)
        : base(message, innerException)
    {
        Address = address;
        FileOffset = -1;
    }

    /// <summary>The log address (LSN) of the first damaged entry.</summary>
    public long Address { get; }

    /// <summary>The segment file holding it, when known.</summary>
    public string? File { get; }

    /// <summary>The offset inside <see cref="File"/>, or -1.</summary>
    public long FileOffset { get; }
}

/// <summary>
/// The log failed to write or flush a range. Nothing at or after that range is ever reported durable;
/// appends are refused until the log is reopened (which recovers from what is verifiably on disk).
/// </summary>
public sealed class LogFaultedException : IOException
{
    /// <summary>Creates the exception.</summary>
    public LogFaultedException(string message, Exception? innerException = null)
        : base(message, innerException)
    {
    }
}

/// <summary>The log holds records of a newer format than this build reads.</summary>
public sealed class LogFormatException : IOException
{
    /// <summary>Creates the exception.</summary>
    public LogFormatException(string message)
        : base(message)
    {
    }
}

/// <summary>
/// The log holds records sealed with a key that is not configured (<see cref="LogEncryptionOptions"/>): no key at all, or
/// not this one (a wrong key has another key id). The log is not opened and nothing on disk is changed; without the key it
/// was written with, the log cannot be read.
/// </summary>
public sealed class LogEncryptionKeyException : IOException
{
    /// <summary>Creates the exception.</summary>
    public LogEncryptionKeyException(string message, long address, string keyId)
        : base(message)
    {
        Address = address;
        KeyId = keyId;
    }

    /// <summary>The LSN of the first record found that needs the key.</summary>
    public long Address { get; }

    /// <summary>The id of the key the record needs (8 hex digits derived from the key; never the key).</summary>
    public string KeyId { get; }

    internal static LogEncryptionKeyException Missing(long lsn, uint keyId, LogKeyRing? ring)
    {
        var id = LogKey.Format(keyId);
        var what = ring is null
            ? $"The log record at LSN {lsn} is encrypted (key id {id}), but no log key is configured"
            : $"The log record at LSN {lsn} is encrypted with key id {id}, which is not among the configured log keys (configured: {LogKeyRing.Describe(ring)}): " +
              "the key this log was written with is missing, or a wrong key is configured";
        return new LogEncryptionKeyException(
            $"{what}. Configure the key this log was written with as LogOptions.Encryption.Key, or among its PreviousKeys " +
            "(PersistentServicesOptions.Log.Encryption in ASP.NET Core; docs/operations.md, \"Encrypting the log\"). " +
            "The log was not opened and nothing on disk was changed; a log whose key is lost cannot be read.",
            lsn,
            id);
    }
}
