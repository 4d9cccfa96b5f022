namespace PersistentServices.Log;

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
