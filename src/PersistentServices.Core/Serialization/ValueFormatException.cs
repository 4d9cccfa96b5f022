namespace PersistentServices;

/// <summary>A logged value cannot be read as the type the running code asks for (its type changed incompatibly).</summary>
public sealed class ValueFormatException : Exception
{
    /// <summary>Creates the exception.</summary>
    public ValueFormatException(string message, Exception? innerException = null)
        : base(message, innerException)
    {
    }
}
