namespace PersistentServices.Client;

/// <summary>One request in the client store, from its storing until the application has its reply.</summary>
internal sealed class ClientEntry(StoredRequest request, long firstLsn)
{
    /// <summary>The LSN of its first Request record (which is also its id): the log keeps everything from the oldest such LSN on.</summary>
    public long FirstLsn { get; } = firstLsn;

    public long Id => Request.EntryId;

    /// <summary>The request as last stored (a move to a new session stores it again with the new ids).</summary>
    public StoredRequest Request { get; set; } = request;

    public StoredReply? Reply { get; set; }

    /// <summary>A call (the application's, or <see cref="PersistentSessionClient.RecoverAsync"/>) is sending it now.</summary>
    public bool Claimed { get; set; }

    /// <summary>The service's address: scheme, host and port.</summary>
    public string Authority => new Uri(Request.Uri).GetLeftPart(UriPartial.Authority);
}

/// <summary>A session of the client at one service: its id and the number its next request gets.</summary>
internal sealed class ClientSession(string id, string authority, long nextSequence)
{
    public string Id { get; } = id;

    public string Authority { get; } = authority;

    public long NextSequence { get; set; } = nextSequence;
}
