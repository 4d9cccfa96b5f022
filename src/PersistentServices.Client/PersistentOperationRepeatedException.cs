namespace PersistentServices.Client;

/// <summary>
/// A request named an <see cref="PersistentRequestOptions.OperationId"/> this client already finished: its reply was handed
/// to the application (perhaps just before the application crashed, so it never used it), or the client gave it up
/// (<see cref="PersistentRequestOutcomeUnknownException"/>, or a reply over the body limit). Nothing was stored or sent: the operation ran at most once, and it does not run again. The
/// client remembers the last <see cref="PersistentClientOptions.FinishedOperationRetention"/> finished operation ids,
/// across restarts (docs/client.md, "Sending an operation again after a crash").
/// </summary>
public sealed class PersistentOperationRepeatedException : Exception
{
    /// <summary>Creates the exception.</summary>
    public PersistentOperationRepeatedException()
    {
    }

    /// <summary>Creates the exception with a message.</summary>
    public PersistentOperationRepeatedException(string message)
        : base(message)
    {
    }

    /// <summary>Creates the exception with a message and a cause.</summary>
    public PersistentOperationRepeatedException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    /// <summary>Creates the exception for an operation id.</summary>
    /// <param name="operationId">The operation id the request named.</param>
    /// <param name="replyHandedOver">True when the operation's reply was handed to the application; false when its outcome was reported unknown.</param>
    public PersistentOperationRepeatedException(string operationId, bool replyHandedOver)
        : base(replyHandedOver
            ? $"Operation '{operationId}' already ran through this client and its reply was handed to the application; it is not sent again (a reply is handed over at most once)."
            : $"Operation '{operationId}' was already given up by this client (its outcome could not be learned, or its reply was too large to keep); it is not sent again.")
    {
        OperationId = operationId;
        ReplyHandedOver = replyHandedOver;
    }

    /// <summary>The operation id the request named.</summary>
    public string? OperationId { get; }

    /// <summary>True when the operation's reply was handed to the application; false when the client gave it up.</summary>
    public bool ReplyHandedOver { get; }
}
